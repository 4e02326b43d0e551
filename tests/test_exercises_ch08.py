"""Exercises of chapter 08: each reference passes its checker, an untouched stub reads
"not attempted", and realistic wrong answers fail with a hint."""

from __future__ import annotations

import torch
from torch import nn

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 08.lstm_param_count
# --------------------------------------------------------------------------


def test_lstm_param_count_with_one_bias_fails():
    def one_bias(i, h, layers):
        return sum(4 * (h * ((i if k == 0 else h) + h) + h) for k in range(layers))

    assert_rejected("08.lstm_param_count", one_bias, "two", "bias_hh")


def test_lstm_param_count_with_input_size_in_every_layer_fails():
    def same_input(i, h, layers):
        return layers * 4 * (h * (i + h) + 2 * h)

    assert_rejected("08.lstm_param_count", same_input, "hidden_size outputs")


def test_lstm_param_count_of_a_gru_fails():
    def gru(i, h, layers):
        return sum(3 * (h * ((i if k == 0 else h) + h) + 2 * h) for k in range(layers))

    assert_rejected("08.lstm_param_count", gru, "four")


def test_lstm_param_count_first_layer_only_fails():
    def first_only(i, h, layers):
        return 4 * (h * (i + h) + 2 * h)

    assert_rejected("08.lstm_param_count", first_only, "first layer")


def test_lstm_param_count_by_building_the_module_passes():
    def build(i, h, layers):
        return sum(p.numel() for p in nn.LSTM(i, h, num_layers=layers).parameters())

    assert check("08.lstm_param_count", build, show=False).passed


# --------------------------------------------------------------------------
# 08.make_windows
# --------------------------------------------------------------------------


def test_make_windows_dropping_the_last_window_fails():
    def one_short(series, T, horizon):
        n = len(series) - T - horizon  # off by one
        X = torch.stack([series[i : i + T] for i in range(n)]).unsqueeze(-1)
        y = torch.stack([series[i + T : i + T + horizon] for i in range(n)])
        return X, y

    assert_rejected("08.make_windows", one_short, "off by one")


def test_make_windows_with_overlapping_target_fails():
    def overlap(series, T, horizon):
        n = len(series) - T - horizon + 1
        X = torch.stack([series[i : i + T] for i in range(n)]).unsqueeze(-1)
        y = torch.stack([series[i + T - 1 : i + T - 1 + horizon] for i in range(n)])
        return X, y

    assert_rejected("08.make_windows", overlap, "overlaps")


def test_make_windows_without_feature_dimension_fails():
    def flat(series, T, horizon):
        X, y = solution("08.make_windows")(series, T, horizon)
        return X.squeeze(-1), y

    assert_rejected("08.make_windows", flat, "feature dimension")


def test_make_windows_with_a_loop_passes():
    def loop(series, T, horizon):
        n = len(series) - T - horizon + 1
        X = torch.stack([series[i : i + T] for i in range(n)])[..., None]
        y = torch.stack([series[i + T : i + T + horizon] for i in range(n)])
        return X, y

    assert check("08.make_windows", loop, show=False).passed


# --------------------------------------------------------------------------
# 08.last_valid_output
# --------------------------------------------------------------------------


def test_last_valid_output_taking_the_last_step_fails():
    def last_step(output, lengths):
        return output[:, -1]

    assert_rejected("08.last_valid_output", last_step, "padding")


def test_last_valid_output_off_by_one_fails():
    def off_by_one(output, lengths):
        return output[torch.arange(output.shape[0]), lengths.clamp(max=output.shape[1] - 1)]

    assert_rejected("08.last_valid_output", off_by_one, "n - 1")


def test_last_valid_output_with_gather_passes():
    def gathered(output, lengths):
        index = (lengths - 1).view(-1, 1, 1).expand(-1, 1, output.shape[2])
        return output.gather(1, index).squeeze(1)

    assert check("08.last_valid_output", gathered, show=False).passed


def test_last_valid_output_with_a_loop_passes():
    def loop(output, lengths):
        return torch.stack([output[b, n - 1] for b, n in enumerate(lengths.tolist())])

    assert check("08.last_valid_output", loop, show=False).passed
