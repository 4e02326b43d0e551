"""Exercises of chapter 09: each reference passes its checker, an untouched stub
reads "not attempted", realistic wrong answers fail with a two-tier hint whose
first tier names the mistake but not the fix, and the library's attention
(F.scaled_dot_product_attention, nn.MultiheadAttention) is refused as a shortcut."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
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
FIX_CODE = ("repeat_interleave", "arange", "unsqueeze", "masked_fill", "dim=-1", ".bool()", ".tril()", "~", "& (")


def assert_two_tier(name, candidate, first, fuller):
    """Rejected with ``first`` words in the first tier (and no fix code), ``fuller`` words in hint(name)."""
    message = assert_rejected(name, candidate, *first).message
    leaked = [code for code in FIX_CODE if code in message]
    assert not leaked, f"the first-tier hint gives the fix away ({leaked}): {message}"
    more = hint(name, show=False)
    for word in fuller:
        assert word in more, f"the fuller hint for {name} should mention {word!r}: {more}"

# --------------------------------------------------------------------------
# 09.local_causal_mask
# --------------------------------------------------------------------------


def test_local_causal_mask_in_multihead_attention_convention_fails():
    def blocked(T, window):  # True = masked out, as nn.MultiheadAttention wants
        return ~solution("09.local_causal_mask")(T, window)

    assert_two_tier("09.local_causal_mask", blocked, ["complement"], ["~"])


def test_local_causal_mask_plain_causal_fails():
    def causal(T, window):  # ignores the window
        return torch.ones(T, T, dtype=torch.bool).tril()

    assert_two_tier("09.local_causal_mask", causal, ["keys"],
                    ["pair (i, j)", "column of query positions", "row of key positions", "broadcasting", "both"])


def test_local_causal_mask_upper_triangle_fails():
    def future(T, window):
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        return (i <= j) & (j - i < window)

    assert_two_tier("09.local_causal_mask", future, ["FUTURE"], ["row (query) index", "column (key) index"])


def test_local_causal_mask_off_by_one_fails():
    def one_too_many(T, window):
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        return (j <= i) & (i - j <= window)

    assert_two_tier("09.local_causal_mask", one_too_many, ["itself included"], ["task text"])
    more = hint("09.local_causal_mask", show=False)
    given = [cond for cond in ("j <= i", "i - j < window", "i - j <= window - 1") if cond in more]
    assert not given, f"the fuller hint should leave the conditions to the task text, but states {given}: {more}"


def test_local_causal_mask_symmetric_band_fails():
    def band(T, window):  # a local but not causal window
        i, j = torch.arange(T).unsqueeze(1), torch.arange(T).unsqueeze(0)
        return (i - j).abs() < window

    assert_two_tier("09.local_causal_mask", band, ["later key"], ["j <= i"])


def test_local_causal_mask_with_a_double_loop_fails():
    def double_loop(T, window):
        mask = torch.zeros(T, T, dtype=torch.bool)
        for i in range(T):
            for j in range(T):
                mask[i, j] = 0 <= i - j < window
        return mask

    assert torch.equal(double_loop(7, 3), solution("09.local_causal_mask")(7, 3)), "the values must be right"
    assert_two_tier("09.local_causal_mask", double_loop, ["`for` loop", "no Python loop"], ["broadcasting"])


def _fill_rows(T, window):
    mask = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        mask[i, max(0, i - window + 1) : i + 1] = True
    return mask


def test_local_causal_mask_with_a_loop_in_a_helper_fails():
    def via_helper(T, window):
        return _fill_rows(T, window)

    assert torch.equal(via_helper(7, 3), solution("09.local_causal_mask")(7, 3)), "the values must be right"
    assert_two_tier("09.local_causal_mask", via_helper, ["T=24", "grows with the sequence length"], ["broadcasting"])


def test_local_causal_mask_float_fails():
    def as_float(T, window):
        return solution("09.local_causal_mask")(T, window).float()

    assert_two_tier("09.local_causal_mask", as_float, ["bool"], [".bool()"])


def test_local_causal_mask_with_triu_and_tril_is_accepted():
    def two_triangles(T, window):
        ones = torch.ones(T, T, dtype=torch.bool)
        return ones.tril() & ones.triu(-(window - 1))

    assert check("09.local_causal_mask", two_triangles, show=False).passed


# --------------------------------------------------------------------------
# 09.grouped_query_attention
# --------------------------------------------------------------------------


def _written_out(q, k, v, causal, expand, scale=True, invert_mask=False):
    group = q.shape[1] // k.shape[1]
    k, v = expand(k, group), expand(v, group)
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if causal:
        T, S = scores.shape[-2:]
        allowed = torch.ones(T, S, dtype=torch.bool).tril()
        scores = scores.masked_fill(allowed if invert_mask else ~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _interleave(t, group):
    return t.repeat_interleave(group, dim=1)


def test_grouped_query_attention_with_repeat_fails():
    def tiled(q, k, v, causal=False):
        return _written_out(q, k, v, causal, lambda t, group: t.repeat(1, group, 1, 1))

    assert_two_tier("09.grouped_query_attention", tiled, ["wrong key/value heads", "0, 1, 0, 1"],
                    ["in place", "0, 0, 1, 1"])


def test_grouped_query_attention_without_scaling_fails():
    def unscaled(q, k, v, causal=False):
        return _written_out(q, k, v, causal, _interleave, scale=False)

    assert_two_tier("09.grouped_query_attention", unscaled, ["too large", "sqrt(d)"], ["divide the scores"])


def test_grouped_query_attention_dividing_by_d_fails():
    """Scores divided by d instead of sqrt(d): named as such, not as a softmax over the wrong axis."""
    def by_d(q, k, v, causal=False):
        return _scaled_by(q, k, v, causal, q.shape[-1])

    result = assert_rejected("09.grouped_query_attention", by_d, "too small", "divided by d = 8", "sqrt(d)")
    assert "dim=-1" not in result.message and "softmax is over the keys" not in result.message, result.message


def _scaled_by(q, k, v, causal, divisor):
    group = q.shape[1] // k.shape[1]
    k, v = _interleave(k, group), _interleave(v, group)
    scores = q @ k.transpose(-2, -1) / divisor
    if causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1) @ v


def test_grouped_query_attention_inverted_causal_mask_fails():
    """-inf on the allowed keys (j <= i): the last query has no key left, its row is NaN."""
    def inverted(q, k, v, causal=False):
        return _written_out(q, k, v, causal, _interleave, invert_mask=True)

    assert_two_tier("09.grouped_query_attention", inverted, ["causal=True", "NaN", "mask is inverted", "j <= i"],
                    ["forbidden pairs", "above the diagonal"])


def test_grouped_query_attention_nan_rows_are_named():
    """Any answer with NaN in its output is told so (here: every score -inf in the causal case)."""
    def all_masked(q, k, v, causal=False):
        out = _written_out(q, k, v, causal, _interleave)
        return out * float("nan") if causal else out

    assert_rejected("09.grouped_query_attention", all_masked, "NaN or inf", "all -inf")


def test_grouped_query_attention_ignoring_causal_fails():
    def no_mask(q, k, v, causal=False):
        return _written_out(q, k, v, False, _interleave)

    assert_two_tier("09.grouped_query_attention", no_mask, ["j <= i"], ["-inf", "before the softmax"])


def test_grouped_query_attention_softmax_over_queries_fails():
    def wrong_axis(q, k, v, causal=False):
        group = q.shape[1] // k.shape[1]
        k, v = _interleave(k, group), _interleave(v, group)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            T, S = scores.shape[-2:]
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
        return scores.softmax(dim=-2) @ v

    assert_two_tier("09.grouped_query_attention", wrong_axis, ["differs"], ["dim=-1"])


def test_grouped_query_attention_returning_weights_fails():
    def with_weights(q, k, v, causal=False):
        out = _written_out(q, k, v, causal, _interleave)
        return out, None

    assert_two_tier("09.grouped_query_attention", with_weights, ["tuple"], ["out, _ = attention"])


def _expand(t, group):
    B, Hkv, S, d = t.shape
    return t[:, :, None].expand(B, Hkv, group, S, d).reshape(B, Hkv * group, S, d)


def test_grouped_query_attention_via_expand_written_out_is_accepted():
    def via_expand(q, k, v, causal=False):
        return _written_out(q, k, v, causal, _expand)

    assert check("09.grouped_query_attention", via_expand, show=False).passed


def _sdpa_gqa(q, k, v, causal=False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _sdpa_after_repeat_interleave(q, k, v, causal=False):
    group = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, _interleave(k, group), _interleave(v, group), is_causal=causal)


def _sdpa_after_expand(q, k, v, causal=False):
    group = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, _expand(k, group), _expand(v, group), is_causal=causal)


def _sdpa_swallowed(q, k, v, causal=False):  # catches the refusal, then answers anyway
    try:
        return _sdpa_gqa(q, k, v, causal)
    except AssertionError:
        return _written_out(q, k, v, causal, _interleave)


def _multihead_attention_forward(q, k, v, causal=False):
    F.multi_head_attention_forward(q, k, v, q.shape[-1], 1, None, None, None, None, False, 0.0, None, None)
    return _written_out(q, k, v, causal, _interleave)


def _multihead_attention_module(q, k, v, causal=False):
    nn.MultiheadAttention(q.shape[-1], 1, batch_first=True)
    return _written_out(q, k, v, causal, _interleave)


@pytest.mark.parametrize("shortcut", [
    _sdpa_gqa, _sdpa_after_repeat_interleave, _sdpa_after_expand, _sdpa_swallowed,
    _multihead_attention_forward, _multihead_attention_module,
])
def test_grouped_query_attention_library_attention_is_refused(shortcut):
    result = assert_rejected("09.grouped_query_attention", shortcut, "yourself")
    assert "scaled_dot_product_attention" in result.message or "ultihead" in result.message or \
        "multi_head_attention_forward" in result.message, result.message


def test_flex_attention_and_the_math_kernel_are_refused():
    import sys

    import torch
    import torch.nn.attention.flex_attention  # noqa: F401  (the module the learner reaches it through)

    def flex(q, k, v, causal=False):
        module = sys.modules["torch.nn.attention.flex_attention"]
        return module.flex_attention(q, k, v, enable_gqa=True)

    assert_rejected("09.grouped_query_attention", flex, "does it for you")

    def math_kernel(q, k, v, causal=False):
        g = q.shape[1] // k.shape[1]
        return torch.ops.aten._scaled_dot_product_attention_math(
            q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=causal)[0]

    assert_rejected("09.grouped_query_attention", math_kernel, "does it for you")


def _repeated(q, k, v):
    g = q.shape[1] // k.shape[1]
    return q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)


#: SDPA through torch.ops: its ATen operator, and each backend kernel (CUDA ones too: the guard refuses the call
#: at dispatch, before a CPU tensor could make it fail for another reason).
_ATEN_SDPA = {
    "scaled_dot_product_attention": lambda q, k, v, c: torch.ops.aten.scaled_dot_product_attention(
        *_repeated(q, k, v), is_causal=c),
    "_scaled_dot_product_flash_attention_for_cpu": lambda q, k, v, c:
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*_repeated(q, k, v), is_causal=c)[0],
    "_scaled_dot_product_flash_attention": lambda q, k, v, c:
        torch.ops.aten._scaled_dot_product_flash_attention(*_repeated(q, k, v), is_causal=c)[0],
    "_scaled_dot_product_efficient_attention": lambda q, k, v, c:
        torch.ops.aten._scaled_dot_product_efficient_attention(*_repeated(q, k, v), None, False, is_causal=c)[0],
    "_scaled_dot_product_cudnn_attention": lambda q, k, v, c:
        torch.ops.aten._scaled_dot_product_cudnn_attention(*_repeated(q, k, v), None, False, is_causal=c)[0],
    "_scaled_dot_product_fused_attention_overrideable": lambda q, k, v, c:
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*_repeated(q, k, v), is_causal=c)[0],
}


@pytest.mark.parametrize("op", [op for op in _ATEN_SDPA if hasattr(torch.ops.aten, op)])
def test_sdpa_through_torch_ops_is_refused(op):
    def through_ops(q, k, v, causal=False):
        return _ATEN_SDPA[op](q, k, v, causal)

    result = assert_rejected("09.grouped_query_attention", through_ops, "does it for you")
    assert op in result.message, result.message


def test_sdpa_kernel_reached_through_a_helper_is_refused():
    def helper(q, k, v, causal):  # the kernel one call further down, via the learner's own function
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=causal)[0]

    def via_helper(q, k, v, causal=False):
        return helper(*_repeated(q, k, v), causal)

    assert_rejected("09.grouped_query_attention", via_helper, "does it for you")


#: The reference solutions' lines (or the calls in them): no fuller hint may paste them.
REFERENCE_CODE = ("torch.arange(T)", "(j <= i) & (i - j < window)", ".tril().bool()", "repeat_interleave",
                  "masked_fill", "~tril", "unsqueeze(", "[T, 1]", "[1, T]", "expand")


@pytest.mark.parametrize(("name", "wrong"), [
    ("09.local_causal_mask", lambda T, window: torch.ones(T, T, dtype=torch.bool).tril()),  # ignores the window
    ("09.local_causal_mask", lambda T, window: ~solution("09.local_causal_mask")(T, window)),
    ("09.grouped_query_attention", lambda q, k, v, causal=False: _written_out(q, k, v, causal,
                                                                               lambda t, g: t.repeat(1, g, 1, 1))),
    ("09.grouped_query_attention", lambda q, k, v, causal=False: _written_out(q, k, v, False, _interleave)),
    ("09.local_causal_mask", lambda T, window: (lambda i, j: (i - j).abs() < window)(  # symmetric band
        torch.arange(T)[:, None], torch.arange(T)[None, :])),
])
def test_fuller_hints_name_the_idea_without_pasting_the_solution(name, wrong):
    assert_rejected(name, wrong)
    more = hint(name, show=False)
    pasted = [code for code in REFERENCE_CODE if code in more]
    assert not pasted, f"the fuller hint for {name} pastes the reference solution ({pasted}): {more}"


def test_local_causal_mask_task_states_that_loops_are_refused():
    from helpers.exercises import EXERCISES

    assert "no Python loop or comprehension" in EXERCISES["09.local_causal_mask"].task


def test_local_causal_mask_with_a_list_comprehension_fails():
    def comprehension(T, window):
        return torch.tensor([[j <= i and i - j < window for j in range(T)] for i in range(T)])

    assert_rejected("09.local_causal_mask", comprehension, "list comprehension", "no Python loop")


@pytest.mark.parametrize("fill", [-1e9, float("-inf")])
def test_grouped_query_attention_causal_mask_hiding_the_diagonal_fails(fill):
    """triu(0) also masks the diagonal: query i sees only j < i (query 0 nothing), named as such."""
    def diagonal_hidden(q, k, v, causal=False):
        group = q.shape[1] // k.shape[1]
        k, v = _interleave(k, group), _interleave(v, group)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(0), fill)
        return scores.softmax(-1) @ v

    assert_two_tier("09.grouped_query_attention", diagonal_hidden, ["causal=True", "ITSELF included", "j < i"],
                    ["diagonal"])
    assert "softmax is over the keys" not in check("09.grouped_query_attention", diagonal_hidden, show=False).message


@pytest.mark.parametrize("enable_gqa", [False, True])
def test_sdpa_math_kernel_as_a_torch_function_is_refused(enable_gqa):
    """torch._scaled_dot_product_attention_math decomposes before dispatch: it is refused by name."""
    def math_kernel(q, k, v, causal=False):
        if enable_gqa:
            return torch._scaled_dot_product_attention_math(q, k, v, is_causal=causal, enable_gqa=True)[0]
        return torch._scaled_dot_product_attention_math(*_repeated(q, k, v), is_causal=causal)[0]

    result = assert_rejected("09.grouped_query_attention", math_kernel, "does it for you")
    assert "_scaled_dot_product_attention_math" in result.message, result.message
