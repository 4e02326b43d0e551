"""Exercises of chapter 08: each reference passes its checker, realistic wrong answers fail with a
first-tier hint that names the mistake but not the fix (the fix comes in the fuller hint), and the
shortcuts the exercises forbid (building nn.LSTM, Tensor.unfold, Python loops) are refused.

The generic checks (every reference passes, every stub reads "not attempted") are in
tests/test_exercises.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

import helpers.exercises as exercises
from helpers.exercises import check, hint, solution
from tests.exercise_support import assert_rejected


@pytest.fixture(autouse=True)
def _first_attempt(monkeypatch):
    """Every test starts with no failed attempts, so a hint's words are checked in the first tier."""
    monkeypatch.setattr(exercises, "_failures", Counter())
    monkeypatch.setattr(exercises, "_fuller", {})


#: Code that gives the fix away: none of it may appear in a first-tier hint.
FIX_CODE = ("4 * (h", "+ 2 * h", "unsqueeze(-1)", "unfold(", "torch.arange(", "[torch.arange", "gather(", "lengths - 1]")


def assert_first_tier_rejected(name: str, candidate, *hint_words: str):
    result = assert_rejected(name, candidate, *hint_words)
    for code in FIX_CODE:
        assert code not in result.message, f"the first-tier hint of {name} gives the fix away ({code!r}): {result.message}"
    return result


# --------------------------------------------------------------------------
# 08.lstm_param_count
# --------------------------------------------------------------------------


def one_bias(i, h, layers):
    return sum(4 * (h * ((i if k == 0 else h) + h) + h) for k in range(layers))


def same_input(i, h, layers):
    return layers * 4 * (h * (i + h) + 2 * h)


def gru(i, h, layers):
    return sum(3 * (h * ((i if k == 0 else h) + h) + 2 * h) for k in range(layers))


def first_only(i, h, layers):
    return 4 * (h * (i + h) + 2 * h)


#: The closed per-layer formula, in the ways a hint could write it: no tier of a hint may give it.
CLOSED_FORMULA = ("4 * (h", "(i + h)", "(h + h)", "+ 2 * h", "2h)")


def test_lstm_param_count_with_one_bias_fails_and_the_fuller_hint_names_the_parts():
    assert_first_tier_rejected("08.lstm_param_count", one_bias, "one bias vector")
    fuller = hint("08.lstm_param_count", show=False)
    for part in ("four gate blocks", "[hidden_size, the layer's input size]", "[hidden_size, hidden_size]",
                 "two bias vectors", "bias_ih", "bias_hh"):
        assert part in fuller, f"the fuller hint should name {part!r}: {fuller}"
    second = check("08.lstm_param_count", one_bias, show=False)
    assert "bias_ih and bias_hh" in second.message, "the second failure should add the fuller hint"


@pytest.mark.parametrize("wrong", [one_bias, "no_biases", "same_input", "gru", "first_only", lambda i, h, layers: 1])
def test_lstm_param_count_fuller_hints_do_not_give_the_formula(wrong):
    """Tier 2 names the weights and their shapes per gate block, not the closed per-layer formula."""
    wrong = globals()[wrong] if isinstance(wrong, str) else wrong
    first = check("08.lstm_param_count", wrong, show=False)
    second = check("08.lstm_param_count", wrong, show=False)
    assert not first.passed and not second.passed
    for text in (second.message, hint("08.lstm_param_count", show=False)):
        for code in CLOSED_FORMULA:
            assert code not in text, f"a hint of 08.lstm_param_count gives the closed formula ({code!r}): {text}"


@pytest.mark.parametrize(("wrong", "words"), [
    (same_input, "second layer"), (gru, "GRU"), (first_only, "first layer only"),
])
def test_lstm_param_count_wrong_formulas_fail(wrong, words):
    assert_first_tier_rejected("08.lstm_param_count", wrong, words)


def no_biases(i, h, layers):
    return sum(4 * h * ((i if k == 0 else h) + h) for k in range(layers))


def test_lstm_param_count_draws_tell_every_mistake_apart():
    """Every drawn size gives each wrong formula its own count, so a hint never names another mistake."""
    for _ in range(300):
        for i, h, layers in exercises.ch08._lstm_configs():
            wrong = (one_bias, no_biases, gru) + ((first_only, same_input) if layers > 1 else ())
            counts = [f(i, h, layers) for f in wrong]
            right = sum(p.numel() for p in nn.LSTM(i, h, num_layers=layers).parameters())
            assert len(set(counts + [right])) == len(counts) + 1, (i, h, layers, counts, right)


def test_lstm_param_count_fallback_does_not_print_the_answer():
    result = assert_first_tier_rejected("08.lstm_param_count", lambda i, h, layers: 1, "too low")
    real = [str(n) for n in range(2, 10**6) if str(n) in result.message.split()]
    assert not real, f"the fallback hint should not print the expected count: {result.message}"


def test_lstm_param_count_lookup_table_fails():
    """The sizes are drawn afresh at every check: answers remembered from one check fail the next."""
    seen = {}

    def spy(i, h, layers):
        seen[(i, h, layers)] = sum(p.numel() for p in nn.LSTM(i, h, num_layers=layers).parameters())
        return seen[(i, h, layers)]

    with torch.random.fork_rng():
        for _ in range(3):  # record answers outside any check
            for i, h, layers in exercises.ch08._lstm_configs():
                spy(i, h, layers)

    def table(i, h, layers):
        return seen.get((i, h, layers), 0)

    assert not check("08.lstm_param_count", table, show=False).passed


def test_lstm_param_count_by_building_the_module_is_refused():
    def build(i, h, layers):
        return sum(p.numel() for p in nn.LSTM(i, h, num_layers=layers).parameters())

    assert_rejected("08.lstm_param_count", build, "without building an nn.LSTM", "torch.nn.LSTM")


def test_lstm_param_count_through_rnnbase_is_refused():
    def build(i, h, layers):
        return sum(p.numel() for p in nn.RNNBase("LSTM", i, h, num_layers=layers).parameters())

    assert_rejected("08.lstm_param_count", build, "torch.nn.RNNBase")


def _linear_layers(i, h, layers):
    """An LSTM layer's weights and biases are exactly those of Linear(in, 4h) plus Linear(h, 4h)."""
    return sum(p.numel() for k in range(layers)
               for m in (nn.Linear(i if k == 0 else h, 4 * h), nn.Linear(h, 4 * h)) for p in m.parameters())


def _scaled_gru(i, h, layers):
    """A GRU has three gate blocks per layer where an LSTM has four: 4/3 of its count is the answer."""
    return sum(p.numel() for p in nn.GRU(i, h, num_layers=layers).parameters()) * 4 // 3


def _scaled_rnn(i, h, layers):
    """A plain RNN has one block per layer: 4 times its count is the answer."""
    return 4 * sum(p.numel() for p in nn.RNN(i, h, num_layers=layers).parameters())


def _gru_cells(i, h, layers):
    return sum(p.numel() for k in range(layers) for p in nn.GRUCell(i if k == 0 else h, h).parameters()) * 4 // 3


def _rnn_cells(i, h, layers):
    return 4 * sum(p.numel() for k in range(layers) for p in nn.RNNCell(i if k == 0 else h, h).parameters())


def _lazy_linear_layers(i, h, layers):
    total = 0
    for k in range(layers):
        for fan_in in (i if k == 0 else h, h):
            m = nn.LazyLinear(4 * h)
            m(torch.zeros(1, fan_in))
            total += sum(p.numel() for p in m.parameters())
    return total


@pytest.mark.parametrize(("built", "name"), [
    (_linear_layers, "torch.nn.Linear"), (_lazy_linear_layers, "torch.nn.Linear"), (_scaled_gru, "torch.nn.GRU"),
    (_scaled_rnn, "torch.nn.RNN`"), (_gru_cells, "torch.nn.GRUCell"), (_rnn_cells, "torch.nn.RNNCell"),
])
def test_lstm_param_count_by_counting_other_modules_is_refused(built, name):
    """Each of these gives the right count (checked first, outside any check), so only the guard can refuse it."""
    with torch.random.fork_rng():
        for i, h, layers in ((5, 7, 1), (3, 4, 3)):
            assert built(i, h, layers) == solution("08.lstm_param_count")(i, h, layers), built.__name__
    assert_rejected("08.lstm_param_count", built, "without building an nn.LSTM", name)


def _conv_layers(i, h, layers):
    """Two 1x1 convolutions, Conv1d(in, 4h, 1) and Conv1d(h, 4h, 1), hold exactly an LSTM layer's count."""
    return sum(p.numel() for k in range(layers)
               for m in (nn.Conv1d(i if k == 0 else h, 4 * h, 1), nn.Conv1d(h, 4 * h, 1)) for p in m.parameters())


class _OwnGates(nn.Module):
    """A module of the learner's own holding an LSTM layer's four gate blocks as parameters."""

    def __init__(self, fan_in, h):
        super().__init__()
        self.w_ih = nn.Parameter(torch.empty(4 * h, fan_in))
        self.w_hh = nn.Parameter(torch.empty(4 * h, h))
        self.b = nn.Parameter(torch.empty(2, 4 * h))


def _own_module(i, h, layers):
    return sum(p.numel() for k in range(layers) for p in _OwnGates(i if k == 0 else h, h).parameters())


@pytest.mark.parametrize("built", [_conv_layers, _own_module])
def test_lstm_param_count_by_building_any_module_is_refused(built):
    """Any module holding parameters built in the answer is refused, not only the listed layers (each gives the right count)."""
    with torch.random.fork_rng():
        for i, h, layers in ((5, 7, 1), (3, 4, 3)):
            assert built(i, h, layers) == solution("08.lstm_param_count")(i, h, layers), built.__name__
    assert_rejected("08.lstm_param_count", built, "built a module with parameters",
                    {"_conv_layers": "Conv1d", "_own_module": "_OwnGates"}[built.__name__])


def test_lstm_param_count_from_tensor_shapes_passes():
    """Counting the entries of plain tensors of the right shapes is the formula itself, and is not refused."""
    def shapes(i, h, layers):
        return sum(torch.empty(4 * h, (i if k == 0 else h) + h).numel() + 8 * h for k in range(layers))

    assert check("08.lstm_param_count", shapes, show=False).passed


def test_lstm_param_count_returning_a_tensor_fails():
    def as_tensor(i, h, layers):
        return torch.tensor(solution("08.lstm_param_count")(i, h, layers))

    assert_rejected("08.lstm_param_count", as_tensor, "int")


def test_lstm_param_count_written_differently_passes():
    def per_block(i, h, layers):
        return 4 * sum(h * i + h * h + 2 * h if k == 0 else 2 * h * h + 2 * h for k in range(layers))

    assert check("08.lstm_param_count", per_block, show=False).passed


# --------------------------------------------------------------------------
# 08.make_windows
# --------------------------------------------------------------------------


def _positions(series, T, horizon, stride, n=None, shift=0):
    n = (len(series) - T - horizon) // stride + 1 if n is None else n
    return torch.arange(n)[:, None] * stride + torch.arange(T + horizon) + shift


def test_make_windows_dropping_the_last_window_fails():
    def one_short(series, T, horizon, stride):
        w = series[_positions(series, T, horizon, stride, n=(len(series) - T - horizon) // stride)]
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", one_short, "off by one")


def test_make_windows_ignoring_the_stride_fails():
    def every_step(series, T, horizon, stride):
        w = series[_positions(series, T, horizon, 1)]
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", every_step, "every stride steps")


def test_make_windows_with_overlapping_target_fails():
    def overlap(series, T, horizon, stride):
        idx = _positions(series, T, horizon, stride)
        X = series[idx[:, :T]][..., None]
        y = series[idx[:, T:] - 1]
        return X, y

    assert_first_tier_rejected("08.make_windows", overlap, "overlaps")


def test_make_windows_without_feature_dimension_fails():
    def flat(series, T, horizon, stride):
        X, y = solution("08.make_windows")(series, T, horizon, stride)
        return X.squeeze(-1), y

    assert_first_tier_rejected("08.make_windows", flat, "[N, T, 1]")
    fuller = hint("08.make_windows", show=False)
    assert "feature dimension of size 1" in fuller, fuller
    assert "unsqueeze" not in fuller, f"the fuller hint should name the idea, not the call: {fuller}"


def test_make_windows_with_unfold_is_refused():
    def unfolded(series, T, horizon, stride):
        w = series.unfold(0, T + horizon, stride)
        return w[:, :T].unsqueeze(-1), w[:, T:]

    assert_rejected("08.make_windows", unfolded, "torch.Tensor.unfold")


def _aten_unfold(series, T, horizon, stride):
    w = torch.ops.aten.unfold(series, 0, T + horizon, stride)  # the operator behind Tensor.unfold, called directly
    return w[:, :T, None], w[:, T:]


def _aten_as_strided(series, T, horizon, stride):
    n = (len(series) - T - horizon) // stride + 1
    w = torch.ops.aten.as_strided(series, (n, T + horizon), (stride, 1))
    return w[:, :T, None], w[:, T:]


def _im2col(series, T, horizon, stride):
    """F.unfold on the series seen as a 1 x L image: every (1, T + horizon) block becomes a column."""
    w = torch.nn.functional.unfold(series.view(1, 1, 1, -1), (1, T + horizon), stride=(1, stride))[0].T
    return w[:, :T, None], w[:, T:]


def _nn_unfold(series, T, horizon, stride):
    w = torch.nn.Unfold((1, T + horizon), stride=(1, stride))(series.view(1, 1, 1, -1))[0].T
    return w[:, :T, None], w[:, T:]


def _identity_conv1d(series, T, horizon, stride):
    """A convolution whose T + horizon output channels each copy one position of the window."""
    kernel = torch.eye(T + horizon).view(T + horizon, 1, T + horizon)
    w = torch.nn.functional.conv1d(series.view(1, 1, -1), kernel, stride=stride)[0].T
    return w[:, :T, None], w[:, T:]


def _identity_conv_module(series, T, horizon, stride):
    conv = nn.Conv1d(1, T + horizon, T + horizon, stride=stride, bias=False)
    with torch.no_grad():
        conv.weight.copy_(torch.eye(T + horizon)[:, None])
    w = conv(series.view(1, 1, -1))[0].T
    return w[:, :T, None], w[:, T:]


def _identity_conv2d(series, T, horizon, stride):
    kernel = torch.eye(T + horizon).view(T + horizon, 1, 1, T + horizon)
    w = torch.nn.functional.conv2d(series.view(1, 1, 1, -1), kernel, stride=(1, stride))[0, :, 0].T
    return w[:, :T, None], w[:, T:]


@pytest.mark.parametrize(("route", "words"), [
    (_aten_unfold, "strided view"), (_aten_as_strided, "strided view"), (_im2col, "im2col"), (_nn_unfold, "im2col"),
    (_identity_conv1d, "identity kernel"), (_identity_conv_module, "identity kernel"),
    (_identity_conv2d, "identity kernel"),
])
def test_make_windows_library_routes_are_refused(route, words):
    """Each route gives the right windows (checked first), without Tensor.unfold by name: the ATen guard refuses it."""
    series = torch.randn(25, generator=torch.Generator().manual_seed(0))
    for T, horizon, stride in ((3, 2, 2), (4, 3, 5), (5, 1, 1)):
        X, y = route(series, T, horizon, stride)
        want_X, want_y = solution("08.make_windows")(series, T, horizon, stride)
        assert torch.allclose(X, want_X) and torch.allclose(y, want_y), route.__name__
    assert_rejected("08.make_windows", route, "does it for you", words)


def test_make_windows_with_a_loop_is_refused():
    def loop(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        X = torch.stack([series[i * stride : i * stride + T] for i in range(n)])[..., None]
        y = torch.stack([series[i * stride + T : i * stride + T + horizon] for i in range(n)])
        return X, y

    assert_first_tier_rejected("08.make_windows", loop, "list comprehension", "no Python loop")


def test_make_windows_with_as_strided_is_refused_like_unfold():
    def strided(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = series.contiguous().as_strided((n, T + horizon), (stride, 1))
        return w[:, :T, None].clone(), w[:, T:].clone()

    assert_rejected("08.make_windows", strided, "as_strided", "does it for you")


def test_make_windows_with_map_is_refused():
    def via_map(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = torch.stack(list(map(lambda s: series[s : s + T + horizon], range(0, n * stride, stride))))
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", via_map, "map()", "no Python loop")


def test_make_windows_with_map_over_python_numbers_is_refused():
    def via_map_tolist(series, T, horizon, stride):
        n, values = (len(series) - T - horizon) // stride + 1, series.tolist()
        w = torch.tensor(list(map(lambda s: values[s : s + T + horizon], range(0, n * stride, stride))))
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", via_map_tolist, "map()")


def test_make_windows_stacking_a_generator_is_refused():
    def stacked(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = torch.stack(tuple(series[i * stride : i * stride + T + horizon] for i in range(n)))
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", stacked, "generator expression", "no Python loop")


def _window_slices(series, n, width, stride):
    return [series[i * stride : i * stride + width] for i in range(n)]


def test_make_windows_stacking_slices_from_a_helper_is_refused():
    """The loop is in a helper, out of the source check's sight: the operator count grows with N."""
    def stacked(series, T, horizon, stride):
        w = torch.stack(_window_slices(series, (len(series) - T - horizon) // stride + 1, T + horizon, stride))
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", stacked, "16 windows", "grows with the number of windows")


def _shifted_columns(series, n, width, stride):
    """One strided slice per step of a window: a loop over T + horizon, not over the windows."""
    return [series[k : k + (n - 1) * stride + 1 : stride] for k in range(width)]


def test_make_windows_stacking_one_slice_per_time_step_is_refused():
    """The helper loops over the steps of a window: the count stays put as N grows, but grows with T."""
    def by_columns(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = torch.stack(_shifted_columns(series, n, T + horizon, stride), dim=1)
        return w[:, :T, None], w[:, T:]

    X, y = by_columns(torch.arange(25.0), 4, 3, 5)
    assert X.shape == (4, 4, 1) and y[0].tolist() == [4.0, 5.0, 6.0], "the route must be right"
    assert_first_tier_rejected("08.make_windows", by_columns, "T=9", "loops over the time steps")


def test_make_windows_rebuilt_from_python_numbers_is_refused():
    """A helper loops over a Python list: no operator per window, but the windows lose the series' history."""
    def from_list(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = torch.tensor(_window_slices(series.tolist(), n, T + horizon, stride))
        return w[:, :T, None], w[:, T:]

    assert_first_tier_rejected("08.make_windows", from_list, "autograd history", "Python numbers")


def test_make_windows_with_index_select_passes():
    def selected(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = series.index_select(0, _positions(series, T, horizon, stride).flatten()).view(n, T + horizon)
        return w[:, :T].unsqueeze(-1), w[:, T:]

    assert check("08.make_windows", selected, show=False).passed


def test_hints_do_not_paste_the_reference_lines():
    """The fuller hints name the idea and the API, not the reference solution's code."""
    for name, pasted, idea in (
            ("08.make_windows", ("starts[:, None]", "torch.arange(", "w[:, :T]", "w[:, T:]", "unsqueeze", "0 .. T",
                                 "column of", "row of the offsets"), "Broadcasting"),
            ("08.last_valid_output", ("torch.arange(", "lengths - 1", "0 .. B", "gather(1", "size 1"),
             "Paired advanced indexing")):
        text = hint(name, show=False)
        assert idea in text, f"the fuller hint of {name} should name the idea ({idea!r}): {text}"
        for code in pasted:
            assert code not in text, f"the fuller hint of {name} pastes the solution ({code!r}): {text}"


# --------------------------------------------------------------------------
# 08.last_valid_output
# --------------------------------------------------------------------------


def test_last_valid_output_taking_the_last_step_fails():
    def last_step(output, lengths):
        return output[:, -1]

    assert_first_tier_rejected("08.last_valid_output", last_step, "padding")


def test_last_valid_output_off_by_one_fails():
    def off_by_one(output, lengths):
        return output[torch.arange(output.shape[0]), lengths.clamp(max=output.shape[1] - 1)]

    assert_first_tier_rejected("08.last_valid_output", off_by_one, "n - 1")
    fuller = hint("08.last_valid_output", show=False)
    assert "numbered from 0" in fuller, fuller
    assert "- 1" not in fuller, f"the fuller hint should name the idea, not the index: {fuller}"


def test_last_valid_output_with_gather_passes():
    def gathered(output, lengths):
        index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, output.shape[2])
        return output.gather(1, index).squeeze(1)

    assert check("08.last_valid_output", gathered, show=False).passed


def test_last_valid_output_with_a_bare_squeeze_fails():
    """gather(...).squeeze() is right for B, H > 1 but drops B or H when either is 1."""
    def squeezed(output, lengths):
        index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, output.shape[2])
        return output.gather(1, index).squeeze()

    out = torch.randn(3, 5, 2)
    lengths = torch.tensor([3, 1, 4])
    assert torch.equal(squeezed(out, lengths), solution("08.last_valid_output")(out, lengths))  # right in general
    result = assert_first_tier_rejected("08.last_valid_output", squeezed, "[B, H]", "squeeze()", "size 1")
    assert "[1, 4, 1]" in result.message, result.message
    assert "squeeze(dim)" in hint("08.last_valid_output", show=False) or "squeeze(dim)" in check(
        "08.last_valid_output", squeezed, show=False).message


def test_last_valid_output_with_a_loop_is_refused():
    def loop(output, lengths):
        return torch.stack([output[b, n - 1] for b, n in enumerate(lengths.tolist())])

    assert_first_tier_rejected("08.last_valid_output", loop, "list comprehension", "no Python loop")


def _row(output, b, n):
    return output[b, n - 1]


def test_last_valid_output_with_a_loop_in_a_helper_is_refused():
    def via_map(output, lengths):
        return torch.stack(list(map(_row, [output] * len(lengths), range(len(lengths)), lengths.tolist())))

    assert_first_tier_rejected("08.last_valid_output", via_map, "grows with the batch")


def _step_masks(output, lengths):
    last = torch.zeros(output.shape[0], output.shape[2], dtype=output.dtype)
    for t in range(output.shape[1]):  # one mask per time step
        last = last + (lengths - 1 == t)[:, None] * output[:, t]
    return last


def test_last_valid_output_looping_over_time_in_a_helper_is_refused():
    """The helper loops over T, not B: the count does not grow with the batch, but grows with T."""
    out = torch.randn(3, 5, 2)
    lengths = torch.tensor([5, 1, 3])
    assert torch.equal(_step_masks(out, lengths), out[torch.arange(3), lengths - 1]), "the route must be right"

    def via_helper(output, lengths):
        return _step_masks(output, lengths)

    assert_first_tier_rejected("08.last_valid_output", via_helper, "T=20", "loops over them")


def test_lstm_cell_and_as_strided_shortcuts_are_refused():
    from torch import nn

    def by_cells(input_size, hidden_size, num_layers):
        return sum(p.numel() for k in range(num_layers)
                   for p in nn.LSTMCell(input_size if k == 0 else hidden_size, hidden_size).parameters())

    assert_rejected("08.lstm_param_count", by_cells, "does it for you")

    def strided(series, T, horizon, stride):
        n = (len(series) - T - horizon) // stride + 1
        w = series.as_strided((n, T + horizon), (stride, 1))
        return w[:, :T].unsqueeze(-1), w[:, T:]

    assert_rejected("08.make_windows", strided, "does it for you")


def test_make_windows_counting_without_the_horizon_then_filtering_fails():
    """N = (L - T) // stride, then dropping the windows whose target runs past the end: one short when
    horizon < stride (L=12, T=3, horizon=1, stride=2: 4 windows instead of 5)."""
    def count_without_horizon(series, T, horizon, stride):
        N = (len(series) - T) // stride
        idx = torch.arange(N)[:, None] * stride + torch.arange(T + horizon)
        idx = idx[idx[:, -1] < len(series)]
        w = series[idx]
        return w[:, :T].unsqueeze(-1), w[:, T:]

    assert_first_tier_rejected("08.make_windows", count_without_horizon, "T=3, horizon=1, stride=2", "5 windows",
                               "you made 4", "[8.0, 9.0, 10.0] with target [11.0], is missing")
    assert "s + T + horizon <= L" in hint("08.make_windows", show=False)
