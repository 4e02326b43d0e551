"""Exercises of chapter 09 (a transformer from scratch): checkers and reference solutions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import exercise

# --------------------------------------------------------------------------
# 09.local_causal_mask
# --------------------------------------------------------------------------


def _local_causal_mask(T: int, window: int) -> torch.Tensor:
    """The mask of causal attention over a sliding window (as in Longformer or Mistral).

    Args:
        T: sequence length (queries and keys).
        window: how many keys each query sees, itself included (>= 1).

    Returns:
        bool ``[T, T]`` in the convention of ``F.scaled_dot_product_attention``:
        ``mask[i, j]`` is True when query ``i`` may attend to key ``j``, that
        is when ``0 <= i - j < window``. With ``window >= T`` it is the plain
        causal mask ``torch.ones(T, T).tril().bool()``.
    """
    i = torch.arange(T).unsqueeze(1)  # query positions, as a column
    j = torch.arange(T).unsqueeze(0)  # key positions, as a row
    return (j <= i) & (i - j < window)


def _as_bool_mask(result, T: int) -> torch.Tensor:
    if not isinstance(result, torch.Tensor):
        raise AssertionError(f"return a torch.Tensor of shape [{T}, {T}], got {type(result).__name__}")
    if tuple(result.shape) != (T, T):
        raise AssertionError(f"the mask for T={T} must have shape [{T}, {T}] (queries x keys), got {list(result.shape)}")
    if result.dtype != torch.bool:
        raise AssertionError(
            f"the mask must be a bool tensor (got {result.dtype}): scaled_dot_product_attention reads a float "
            "mask as numbers to ADD to the scores, not as allowed/forbidden; use .bool() or a comparison"
        )
    return result


@exercise(
    "09.local_causal_mask",
    "return a bool [T, T] mask in F.scaled_dot_product_attention's convention (True = may attend) "
    "where query i may attend to key j when j <= i and i - j < window (itself and the window - 1 "
    "keys before it).",
    reference=_local_causal_mask,
)
def _test_local_causal_mask(candidate) -> None:
    for T, window in [(7, 3), (7, 1), (6, 6), (5, 9), (8, 2)]:
        want = _local_causal_mask(T, window)
        got = _as_bool_mask(candidate(T, window), T)
        if torch.equal(got, ~want):
            raise AssertionError(
                f"for T={T}, window={window} you returned the complement of the answer: True must mean "
                "'may attend' (scaled_dot_product_attention's convention), not 'masked out' "
                "(nn.MultiheadAttention's convention)"
            )
        if torch.equal(got, want.T) and not torch.equal(got, want):
            raise AssertionError(
                f"for T={T}, window={window} your mask lets queries attend to FUTURE keys: rows are queries "
                "and columns are keys, so query i may see keys j <= i (the lower triangle)"
            )
        if (got & ~torch.ones(T, T, dtype=torch.bool).tril()).any():
            raise AssertionError(f"for T={T}, window={window} some query may attend to a later key; a causal mask keeps j <= i")
        per_row = got.sum(dim=1)
        want_row = want.sum(dim=1)
        if not torch.equal(got, want):
            raise AssertionError(
                f"for T={T}, window={window} each query should see min(i + 1, window) keys "
                f"{want_row.tolist()} (itself included), yours see {per_row.tolist()}"
            )
    # the plain causal mask is the special case window >= T
    assert torch.equal(_as_bool_mask(candidate(5, 5), 5), torch.ones(5, 5).tril().bool()), (
        "with window >= T the answer is the plain causal mask torch.ones(T, T).tril().bool()"
    )


# --------------------------------------------------------------------------
# 09.grouped_query_attention
# --------------------------------------------------------------------------


def _grouped_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Grouped-query attention (Ainslie et al. 2023, used by Llama 2 70B and later), written out.

    Args:
        q: float ``[B, Hq, T, d]`` queries.
        k, v: float ``[B, Hkv, S, d]`` keys and values, with ``Hq`` a multiple of
            ``Hkv``; query heads ``h * g ... (h + 1) * g - 1`` (``g = Hq // Hkv``)
            share key/value head ``h``.
        causal: query ``i`` attends only to keys ``j <= i`` (needs ``T == S``).

    Returns:
        ``[B, Hq, T, d]``, equal to
        ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)``.
    """
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [B, Hq, S, d]: each kv head used by `group` consecutive query heads
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [B, Hq, T, S]
    if causal:
        T, S = scores.shape[-2:]
        allowed = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ v


@exercise(
    "09.grouped_query_attention",
    "write grouped_query_attention(q, k, v, causal=False) for q [B, Hq, T, d] and k, v [B, Hkv, S, d] "
    "(Hq a multiple of Hkv): query heads h*g .. h*g+g-1 (g = Hq // Hkv) share key/value head h. "
    "Write out softmax(q k^T / sqrt(d)) v yourself (no enable_gqa); causal=True lets query i see keys j <= i.",
    reference=_grouped_query_attention,
)
def _test_grouped_query_attention(candidate) -> None:
    g = torch.Generator().manual_seed(9)
    cases = [  # (B, Hq, Hkv, T, S, d, causal)
        (2, 4, 4, 5, 5, 8, False),  # plain multi-head attention (g = 1)
        (2, 8, 2, 6, 6, 16, False),  # grouped: 4 query heads per kv head
        (1, 6, 3, 5, 7, 8, False),  # cross-attention shape: S != T
        (2, 8, 2, 6, 6, 16, True),  # grouped and causal
        (1, 4, 1, 5, 5, 64, True),  # multi-query attention (one kv head), wide heads
    ]
    for B, Hq, Hkv, T, S, d, causal in cases:
        q = torch.randn(B, Hq, T, d, generator=g)
        k = torch.randn(B, Hkv, S, d, generator=g)
        v = torch.randn(B, Hkv, S, d, generator=g)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        got = candidate(q.clone(), k.clone(), v.clone(), causal=causal)
        where = f"(Hq={Hq}, Hkv={Hkv}, T={T}, S={S}, d={d}, causal={causal})"
        if isinstance(got, tuple):
            raise AssertionError("return only the output tensor, not a tuple such as (output, weights)")
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"return the output tensor [B, Hq, T, d], got {type(got).__name__} {where}")
        if tuple(got.shape) != tuple(want.shape):
            raise AssertionError(f"the output must have shape {list(want.shape)} = [B, Hq, T, d], got {list(got.shape)} {where}")
        if torch.allclose(got, want, atol=1e-5, rtol=1e-4):
            continue
        group = Hq // Hkv
        tiled = F.scaled_dot_product_attention(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1), is_causal=causal)
        if torch.allclose(got, tiled, atol=1e-5, rtol=1e-4):
            raise AssertionError(
                f"query heads are paired with the wrong key/value heads {where}: heads 0..{group - 1} share kv head 0, "
                "so use k.repeat_interleave(g, dim=1), not k.repeat(...), which cycles 0, 1, 0, 1, ..."
            )
        unscaled = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=1.0)
        if torch.allclose(got, unscaled, atol=1e-5, rtol=1e-4):
            raise AssertionError(f"divide the scores q @ k^T by sqrt(d) = {math.sqrt(d):g} before the softmax {where}")
        if causal and torch.allclose(got, F.scaled_dot_product_attention(q, k, v, enable_gqa=True), atol=1e-5, rtol=1e-4):
            raise AssertionError(f"with causal=True query i may only attend to keys j <= i; your output ignores the mask {where}")
        raise AssertionError(
            f"the output differs from F.scaled_dot_product_attention(q, k, v, is_causal={causal}, enable_gqa=True) "
            f"by up to {(got - want).abs().max().item():.3g} {where}; is the softmax over the keys (dim=-1)?"
        )
