"""Exercises of chapter 09 (a transformer from scratch): checkers and reference solutions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import Hint, Shortcut, exercise
from .loops import ops_issued, python_loop

# --------------------------------------------------------------------------
# 09.local_causal_mask
# --------------------------------------------------------------------------


def _local_causal_mask(T: int, window: int) -> torch.Tensor:
    """The mask of causal attention over a sliding window (Mistral's sliding-window attention).

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
        raise Hint(f"return a torch.Tensor of shape [{T}, {T}], got {type(result).__name__}",
                   "build the mask with torch operations on position tensors, not a Python list")
    if tuple(result.shape) != (T, T):
        raise Hint(f"the mask for T={T} must have shape [{T}, {T}] (queries x keys), got {list(result.shape)}",
                   "one row per query position i and one column per key position j, both 0 .. T - 1")
    if result.dtype != torch.bool:
        raise Hint(
            f"the mask must be a bool tensor (got {result.dtype}): scaled_dot_product_attention reads a float "
            "mask as numbers to ADD to the scores, not as allowed/forbidden",
            "a comparison such as a <= b gives a bool tensor directly; or convert with .bool()",
        )
    return result


@exercise(
    "09.local_causal_mask",
    "return a bool [T, T] mask in F.scaled_dot_product_attention's convention (True = may attend) "
    "where query i may attend to key j when j <= i and i - j < window (itself and the window - 1 "
    "keys before it), for all pairs at once with tensor operations (no Python loop or comprehension over positions).",
    reference=_local_causal_mask,
    hint="Make a column of query positions and a row of key positions and compare them by broadcasting, as "
         "section 2's padding mask compares positions with lengths: each condition of the task then gives "
         "a whole bool [T, T] tensor, and the mask is where both hold. Rows are queries and columns are "
         "keys, and True must mean 'may attend'.",
)
def _test_local_causal_mask(candidate) -> None:
    _ALL_PAIRS = ("think of the mask as a function of the pair (i, j): tensors of query and key positions, "
                  "combined by broadcasting, give every pair at once")
    loop = python_loop(candidate)
    if loop is not None:
        raise Hint(f"your function has {loop}; this exercise asks for the whole [T, T] mask from tensor operations, "
                   "with no Python loop over positions", _ALL_PAIRS)
    for T, window in [(7, 3), (7, 1), (6, 6), (5, 9), (8, 2)]:
        want = _local_causal_mask(T, window)
        got = _as_bool_mask(candidate(T, window), T)
        if torch.equal(got, ~want):
            raise Hint(
                f"for T={T}, window={window} you returned the complement of the answer: True must mean "
                "'may attend' (scaled_dot_product_attention's convention), not 'masked out' "
                "(nn.MultiheadAttention's convention)",
                "invert your mask with ~, or flip the comparisons that build it",
            )
        if torch.equal(got, want.T) and not torch.equal(got, want):
            raise Hint(
                f"for T={T}, window={window} your mask lets queries attend to FUTURE keys: rows are queries "
                "and columns are keys, so query i may see keys j <= i (the lower triangle)",
                "i is the row (query) index and j the column (key) index: check which of the two each of your "
                "comparisons treats as the query",
            )
        if (got & ~torch.ones(T, T, dtype=torch.bool).tril()).any():
            raise Hint(f"for T={T}, window={window} some query may attend to a later key; a causal mask keeps j <= i",
                       "a pair is allowed only when it meets the window condition AND j <= i")
        per_row = got.sum(dim=1)
        want_row = want.sum(dim=1)
        if not torch.equal(got, want):
            raise Hint(
                f"for T={T}, window={window} each query should see min(i + 1, window) keys "
                f"{want_row.tolist()} (itself included), yours see {per_row.tolist()}",
                "think of the mask as a function of the pair (i, j): compare a column of query positions with "
                "a row of key positions by broadcasting, and keep the pairs that meet both of the conditions "
                "the task text states",
            )
    # no loop hidden in a helper: building the mask for T = 24 issues as many operators as for T = 8
    short, long = ops_issued(candidate, 8, 3), ops_issued(candidate, 24, 3)
    if short != long:
        raise Hint(f"your function issues {short} tensor operations for T=8 and {long} for T=24: the count grows with "
                   "the sequence length, so something loops over the positions", _ALL_PAIRS)
    # the plain causal mask is the special case window >= T
    if not torch.equal(_as_bool_mask(candidate(5, 5), 5), torch.ones(5, 5).tril().bool()):
        raise Hint("with window >= T the answer should be the plain causal mask",
                   "when window >= T every key j <= i is fewer than window steps back, so only the causal "
                   "condition is left: the lower triangle of the [T, T] grid, diagonal included")


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


#: SDPA's backend kernels (MATH, the CPU flash kernel, CUDA's flash, memory-efficient and cuDNN ones, the
#: OVERRIDEABLE slot of other devices): a checker refuses those the installed torch has.
_SDPA_KERNELS = (
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)

def _hides_the_diagonal(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Does ``got`` match causal attention that also masks the diagonal (query i sees only keys j < i)?

    Query 0 then has no key left: NaN if the masked scores were -inf, the plain mean of the values if they were a
    large finite negative number (-1e9, the dtype's min); both count.
    """
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    T, S = scores.shape[-2:]
    hidden = torch.ones(T, S, dtype=torch.bool).triu()  # j >= i: the diagonal too
    finite = scores.masked_fill(hidden, -1e9).softmax(dim=-1) @ v
    if torch.allclose(got, finite, atol=1e-5, rtol=1e-4):
        return True
    nan = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1) @ v
    return torch.equal(torch.isnan(got), torch.isnan(nan)) and torch.allclose(
        got.nan_to_num(), nan.nan_to_num(), atol=1e-5, rtol=1e-4)


#: SDPA kernels and fused attention exposed as ``torch.*`` functions: refused by name when the learner calls one
#: (those that are not decomposed before dispatch are refused through ``_SDPA_KERNELS`` as well).
_SDPA_TORCH_FUNCTIONS = (
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_attention_math_for_mps",
    "_native_multi_head_attention",
    "_triton_scaled_dot_attention",
    "_triton_multi_head_attention",
)


@exercise(
    "09.grouped_query_attention",
    "write grouped_query_attention(q, k, v, causal=False) for q [B, Hq, T, d] and k, v [B, Hkv, S, d] "
    "(Hq a multiple of Hkv): query heads h*g .. h*g+g-1 (g = Hq // Hkv) share key/value head h. "
    "Write out softmax(q k^T / sqrt(d)) v yourself (no enable_gqa); causal=True lets query i see keys j <= i "
    "(causal needs T == S).",
    reference=_grouped_query_attention,
    shortcuts=(
        # every SDPA call, with or without enable_gqa: the task is to write the attention out
        Shortcut("torch.nn.functional.scaled_dot_product_attention", does="F.scaled_dot_product_attention"),
        Shortcut("torch.nn.functional.multi_head_attention_forward", does="F.multi_head_attention_forward"),
        Shortcut("torch.nn.MultiheadAttention", does="nn.MultiheadAttention"),
        Shortcut("torch.nn.attention.flex_attention.flex_attention", does="flex_attention", lazy=True),
        # SDPA's math backend as a torch function (CompositeImplicit: it decomposes into matmul and softmax
        # before dispatch, so no dispatch-level guard sees it), with or without enable_gqa
        *(Shortcut(f"torch.{name}", does=f"the SDPA kernel `torch.{name}`")
          for name in _SDPA_TORCH_FUNCTIONS if hasattr(torch, name)),
        # the ATen operator behind F.scaled_dot_product_attention, called through torch.ops
        Shortcut("torch.ops.aten.scaled_dot_product_attention",
                 does="SDPA's ATen operator (`torch.ops.aten.scaled_dot_product_attention`)"),
        # SDPA's backend kernels, however the learner's code reaches them
        *(Shortcut(f"torch.ops.aten.{op}", reached=True, does=f"the SDPA kernel `torch.ops.aten.{op}`")
          for op in _SDPA_KERNELS if hasattr(torch.ops.aten, op)),
    ),
    goal="softmax(q k^T / sqrt(d)) v and the head grouping",
    hint="Give every query head its key/value head first: query heads h*g to h*g+g-1 share kv head h, so "
         "each kv head must be repeated g times in place along the head dimension (0, 0, 1, 1, ...), not "
         "the whole head axis tiled (0, 1, 0, 1, ...), and the two ways of repeating a tensor differ "
         "exactly there. Then it is ordinary scaled dot-product attention as section 1 writes it, with "
         "section 2's causal mask when causal=True.",
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
            raise Hint("return only the output tensor, not a tuple such as (output, weights)",
                       "if you call this chapter's attention(), keep its first result: out, _ = attention(...)")
        if not isinstance(got, torch.Tensor):
            raise Hint(f"return the output tensor [B, Hq, T, d], got {type(got).__name__} {where}",
                       "the result of weights @ v is that tensor")
        if tuple(got.shape) != tuple(want.shape):
            raise Hint(f"the output must have shape {list(want.shape)} = [B, Hq, T, d], got {list(got.shape)} {where}",
                       "k and v need Hq heads (one per query head) before q @ k^T; leave B, T and d as they are")
        if torch.allclose(got, want, atol=1e-5, rtol=1e-4):
            continue
        group = Hq // Hkv
        tiled = F.scaled_dot_product_attention(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1), is_causal=causal)
        if torch.allclose(got, tiled, atol=1e-5, rtol=1e-4):
            raise Hint(
                f"query heads are paired with the wrong key/value heads {where}: query heads 0..{group - 1} must "
                "all use kv head 0, but yours cycle through the kv heads 0, 1, 0, 1, ...",
                "Tensor.repeat tiles the whole head axis (kv heads 0, 1, 0, 1, ...); the pairing asked for "
                "repeats each kv head g times in place (0, 0, 1, 1, ...) along the head dimension, so that "
                "neighbouring query heads meet the same kv head",
            )
        unscaled = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=1.0)
        if torch.allclose(got, unscaled, atol=1e-5, rtol=1e-4):
            raise Hint(f"your scores are too large: the output matches attention without the 1/sqrt(d) factor {where}",
                       f"divide the scores q @ k^T by sqrt(d) = {math.sqrt(d):g} before the softmax")
        by_d = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, scale=1.0 / d)
        if torch.allclose(got, by_d, atol=1e-5, rtol=1e-4):
            raise Hint(
                f"your scores are too small: the output matches attention with q @ k^T divided by d = {d}, where "
                f"the task divides by sqrt(d) = {math.sqrt(d):g} {where}",
                "the 1/sqrt(d) factor keeps the variance of a dot product of d unit-variance numbers at 1; dividing "
                "by d shrinks the scores further and flattens the softmax",
            )
        if causal and _hides_the_diagonal(got, q, k, v):
            raise Hint(
                f"with causal=True each query must attend to the keys j <= i, ITSELF included; your output matches "
                f"attention where query i sees only the keys before it (j < i) {where}, so the diagonal "
                "pairs (j = i) are masked too, and query 0 is left with no key at all.",
                "the forbidden pairs are strictly above the diagonal: torch.triu and torch.tril take a `diagonal` "
                "argument that says whether the main diagonal itself is part of the triangle they keep",
            )
        bad_rows = (~torch.isfinite(got)).any(dim=-1)  # [B, Hq, T]: queries whose output holds NaN or inf
        if bad_rows.any():
            queries = sorted({int(i) for i in bad_rows.nonzero()[:, -1]})
            kept = torch.ones(T, S, dtype=torch.bool).tril()
            inverted = (q @ k.repeat_interleave(group, 1).transpose(-2, -1) / math.sqrt(d)).masked_fill(kept, float("-inf"))
            inverted = inverted.softmax(dim=-1) @ v.repeat_interleave(group, 1)
            same_nan = torch.equal(torch.isnan(got), torch.isnan(inverted))
            if causal and same_nan and torch.allclose(got.nan_to_num(), inverted.nan_to_num(), atol=1e-5, rtol=1e-4):
                raise Hint(
                    f"with causal=True your output is NaN for query {queries[0]}"
                    f"{f' (and {len(queries) - 1} more)' if len(queries) > 1 else ''} {where}: "
                    "your mask is inverted. It sets to -inf the keys a query may see (j <= i) and keeps the later "
                    "ones, so the last query has no key left, and a softmax over only -inf scores is 0/0 = NaN",
                    "masked_fill writes -inf where its mask is True: that mask must be True exactly for the "
                    "forbidden pairs, the keys after the query (above the diagonal)",
                )
            raise Hint(
                f"your output holds NaN or inf for queries {queries[:5]} {where}: a softmax over a row whose scores "
                "are all -inf (or inf) is 0/0",
                "every query must keep at least one key (itself, in the causal case) with a finite score; check "
                "which pairs your mask sets to -inf",
            )
        if causal and torch.allclose(got, F.scaled_dot_product_attention(q, k, v, enable_gqa=True), atol=1e-5, rtol=1e-4):
            raise Hint(f"with causal=True query i may only attend to keys j <= i; your output ignores the mask {where}",
                       "the forbidden scores (key j after query i) must become -inf before the softmax, so that "
                       "their weights come out exactly 0")
        raise Hint(
            f"the output differs from F.scaled_dot_product_attention(q, k, v, is_causal={causal}, enable_gqa=True) "
            f"by up to {(got - want).abs().max().item():.3g} {where}",
            "the softmax is over the keys, dim=-1: each query's weights must sum to 1",
        )
