"""Exercises of chapter 20: realistic wrong answers fail with a hint (the generic
reference / stub checks run in tests/test_exercises.py)."""

from __future__ import annotations

import torch

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 20.online_update
# --------------------------------------------------------------------------


def test_online_update_without_rescaling_fails():
    def no_rescale(m, d, chunk):
        m_new = torch.maximum(m, chunk.max())
        if m_new == float("-inf"):
            return m, d
        return m_new, d + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", no_rescale, "rescale", "d * exp(m - m_new)")


def test_online_update_with_the_sign_flipped_fails():
    def flipped(m, d, chunk):
        m_new = torch.maximum(m, chunk.max())
        if m_new == float("-inf"):
            return m, d
        return m_new, d * torch.exp(m_new - m) + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", flipped, "sign")


def test_online_update_without_the_minus_inf_guard_fails():
    def unguarded(m, d, chunk):
        m_new = torch.maximum(m, chunk.max())
        return m_new, d * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", unguarded, "NaN", "-inf")


def test_online_update_keeping_only_the_chunk_max_fails():
    def chunk_max(m, d, chunk):
        m_new = chunk.max()
        if m_new == float("-inf"):
            return m, d
        return m_new, d * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()

    assert_rejected("20.online_update", chunk_max, "max(m, max(chunk))")


def test_online_update_returning_floats_is_accepted():
    ref = solution("20.online_update")

    def as_floats(m, d, chunk):
        m_new, d_new = ref(m, d, chunk)
        return float(m_new), float(d_new)

    assert check("20.online_update", as_floats, show=False).passed


# --------------------------------------------------------------------------
# 20.softmax_gbps
# --------------------------------------------------------------------------


def test_gbps_counting_only_reads_fails():
    def reads_only(rows, cols, seconds, dtype=torch.float32):
        return rows * cols * torch.empty((), dtype=dtype).element_size() / seconds / 1e9

    assert_rejected("20.softmax_gbps", reads_only, "read + write")


def test_gbps_in_gibibytes_fails():
    def gib(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * torch.empty((), dtype=dtype).element_size() / seconds / 2**30

    assert_rejected("20.softmax_gbps", gib, "GiB")


def test_gbps_ignoring_the_dtype_fails():
    def four_bytes(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * 4 / seconds / 1e9

    assert_rejected("20.softmax_gbps", four_bytes, "element_size")


def test_gbps_in_bits_fails():
    def bits(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * torch.empty((), dtype=dtype).element_size() * 8 / seconds / 1e9

    assert_rejected("20.softmax_gbps", bits, "bits")


def test_gbps_treating_seconds_as_milliseconds_fails():
    def ms(rows, cols, seconds, dtype=torch.float32):
        return 2 * rows * cols * torch.empty((), dtype=dtype).element_size() / (seconds / 1e3) / 1e9

    assert_rejected("20.softmax_gbps", ms, "seconds")
