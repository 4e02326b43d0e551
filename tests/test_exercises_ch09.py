"""Exercises of chapter 09: each reference passes its checker, an untouched stub
reads "not attempted", and realistic wrong answers fail with a hint."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 09.local_causal_mask
# --------------------------------------------------------------------------


def test_local_causal_mask_in_multihead_attention_convention_fails():
    def blocked(T, window):  # True = masked out, as nn.MultiheadAttention wants
        return ~solution("09.local_causal_mask")(T, window)

    assert_rejected("09.local_causal_mask", blocked, "complement")


def test_local_causal_mask_plain_causal_fails():
    def causal(T, window):  # ignores the window
        return torch.ones(T, T, dtype=torch.bool).tril()

    assert_rejected("09.local_causal_mask", causal, "keys")


def test_local_causal_mask_upper_triangle_fails():
    def future(T, window):
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        return (i <= j) & (j - i < window)

    assert_rejected("09.local_causal_mask", future, "FUTURE")


def test_local_causal_mask_off_by_one_fails():
    def one_too_many(T, window):
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        return (j <= i) & (i - j <= window)

    assert_rejected("09.local_causal_mask", one_too_many, "itself included")


def test_local_causal_mask_symmetric_band_fails():
    def band(T, window):  # a local but not causal window
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        return (i - j).abs() < window

    assert_rejected("09.local_causal_mask", band, "later key")


def test_local_causal_mask_float_fails():
    def as_float(T, window):
        return solution("09.local_causal_mask")(T, window).float()

    assert_rejected("09.local_causal_mask", as_float, "bool")


def test_local_causal_mask_with_triu_and_tril_is_accepted():
    def two_triangles(T, window):
        ones = torch.ones(T, T, dtype=torch.bool)
        return ones.tril() & ones.triu(-(window - 1))

    assert check("09.local_causal_mask", two_triangles, show=False).passed


# --------------------------------------------------------------------------
# 09.grouped_query_attention
# --------------------------------------------------------------------------


def _written_out(q, k, v, causal, expand, scale=True):
    group = q.shape[1] // k.shape[1]
    k, v = expand(k, group), expand(v, group)
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1) @ v


def _interleave(t, group):
    return t.repeat_interleave(group, dim=1)


def test_grouped_query_attention_with_repeat_fails():
    def tiled(q, k, v, causal=False):
        return _written_out(q, k, v, causal, lambda t, group: t.repeat(1, group, 1, 1))

    assert_rejected("09.grouped_query_attention", tiled, "repeat_interleave")


def test_grouped_query_attention_without_scaling_fails():
    def unscaled(q, k, v, causal=False):
        return _written_out(q, k, v, causal, _interleave, scale=False)

    assert_rejected("09.grouped_query_attention", unscaled, "sqrt(d)")


def test_grouped_query_attention_ignoring_causal_fails():
    def no_mask(q, k, v, causal=False):
        return _written_out(q, k, v, False, _interleave)

    assert_rejected("09.grouped_query_attention", no_mask, "j <= i")


def test_grouped_query_attention_softmax_over_queries_fails():
    def wrong_axis(q, k, v, causal=False):
        group = q.shape[1] // k.shape[1]
        k, v = _interleave(k, group), _interleave(v, group)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            T, S = scores.shape[-2:]
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
        return scores.softmax(dim=-2) @ v

    assert_rejected("09.grouped_query_attention", wrong_axis, "dim=-1")


def test_grouped_query_attention_returning_weights_fails():
    def with_weights(q, k, v, causal=False):
        out = _written_out(q, k, v, causal, _interleave)
        return out, None

    assert_rejected("09.grouped_query_attention", with_weights, "tuple")


def test_grouped_query_attention_via_expand_and_sdpa_is_accepted():
    def via_expand(q, k, v, causal=False):
        B, Hkv, S, d = k.shape
        group = q.shape[1] // Hkv
        k = k[:, :, None].expand(B, Hkv, group, S, d).reshape(B, Hkv * group, S, d)
        v = v[:, :, None].expand(B, Hkv, group, S, d).reshape(B, Hkv * group, S, d)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    assert check("09.grouped_query_attention", via_expand, show=False).passed
