"""Exercises of chapter 20 (C++ and CUDA extensions): checkers and reference solutions."""

from __future__ import annotations

import math

import torch

from . import exercise

INF = float("inf")

# --------------------------------------------------------------------------
# 20.online_update
# --------------------------------------------------------------------------


def _online_update(m: torch.Tensor, d: torch.Tensor, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the online softmax (Milakov and Gimelshein, 2018) over a chunk of a row.

    Args:
        m: the running maximum so far, a 0-dim float64 tensor (``-inf`` before any element).
        d: the running sum of ``exp(x - m)`` so far, a 0-dim float64 tensor (0 at the start).
        chunk: the next elements of the row, a 1-D float64 tensor (at least one element).

    Returns:
        ``(m_new, d_new)`` with ``m_new = max(m, max(chunk))`` and
        ``d_new = d * exp(m - m_new) + sum(exp(chunk - m_new))``. While every
        element seen is ``-inf`` the state stays ``(-inf, 0)``: the formula
        would compute ``-inf - (-inf) = NaN`` there.
    """
    m_new = torch.maximum(m, chunk.max())
    if m_new == -INF:
        return m, d
    return m_new, d * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum()


def _run_online(candidate, row: torch.Tensor, chunk: int):
    m = torch.tensor(-INF, dtype=torch.float64)
    d = torch.tensor(0.0, dtype=torch.float64)
    for start in range(0, len(row), chunk):
        out = candidate(m.clone(), d.clone(), row[start : start + chunk].clone())
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise AssertionError(f"return a pair (m_new, d_new); you returned {type(out).__name__}")
        m, d = (torch.as_tensor(v, dtype=torch.float64).reshape(()) for v in out)
    return m, d


@exercise(
    "20.online_update",
    "online_update(m, d, chunk) -> (m_new, d_new): update the running maximum m and the running sum "
    "d = sum(exp(x - m)) of a row with the next chunk of elements (the online softmax recurrence).",
    reference=_online_update,
)
def _test_online_update(candidate) -> None:
    g = torch.Generator().manual_seed(20)
    rising = torch.arange(12, dtype=torch.float64)  # every chunk brings a new maximum
    masked = torch.randn(20, dtype=torch.float64, generator=g)
    masked[:7] = -INF  # the row starts with masked entries
    cases = [
        ("a random row in chunks of 4", torch.randn(16, dtype=torch.float64, generator=g) * 3, 4),
        ("a rising row (each chunk has a new maximum) in chunks of 3", rising, 3),
        ("a row with large values in chunks of 5", torch.randn(25, dtype=torch.float64, generator=g) * 300, 5),
        ("a row starting with -inf (masked) entries, chunks of 3", masked, 3),
        ("a random row one element at a time", torch.randn(9, dtype=torch.float64, generator=g), 1),
    ]
    for label, row, chunk in cases:
        m, d = _run_online(candidate, row, chunk)
        want_m = row.max()
        want_d = torch.exp(row - want_m).sum()
        if (torch.isnan(m) or torch.isnan(d)) and not torch.isinf(row).any():
            raise AssertionError(
                f"{label}: got NaN on a row with no -inf in it. At the start m = -inf and d = 0, so the rescale "
                "factor must be exp(m - m_new) = 0 (m - m_new <= 0); exp(m_new - m) is inf and 0 * inf = NaN: check the sign"
            )
        if torch.isnan(m) or torch.isnan(d):
            raise AssertionError(
                f"{label}: got NaN. While the maximum is still -inf, m - m_new is -inf - (-inf) = NaN: "
                "when the new maximum is -inf, return (m, d) unchanged"
            )
        if m != want_m:
            raise AssertionError(f"{label}: the final m is {float(m):.6g} but the row's maximum is {float(want_m):.6g}; m_new = max(m, max(chunk))")
        if torch.isinf(d) or not math.isclose(float(d), float(want_d), rel_tol=1e-9):
            partial = _run_online(lambda m, d, c: (torch.maximum(m, c.max()), d + torch.exp(c - torch.maximum(m, c.max())).sum()), row, chunk)[1]
            if math.isclose(float(d), float(partial), rel_tol=1e-9):
                raise AssertionError(
                    f"{label}: d is {float(d):.6g}, want {float(want_d):.6g}. When the maximum grows, the old sum was "
                    "taken relative to the old maximum: rescale it, d * exp(m - m_new), before adding the chunk"
                )
            raise AssertionError(
                f"{label}: d is {float(d):.6g}, want sum(exp(x - max)) = {float(want_d):.6g}. "
                "d_new = d * exp(m - m_new) + sum(exp(chunk - m_new)) (note the sign: m - m_new <= 0)"
            )


# --------------------------------------------------------------------------
# 20.softmax_gbps
# --------------------------------------------------------------------------


def _softmax_gbps(rows: int, cols: int, seconds: float, dtype: torch.dtype = torch.float32) -> float:
    """Effective bandwidth of a softmax over a (rows, cols) tensor that took ``seconds``.

    The op must read every element once and write every element once:
    ``2 * rows * cols * itemsize`` bytes, where itemsize is the dtype's size
    in bytes (4 for float32, 2 for bfloat16). GB/s uses decimal gigabytes, 1e9
    bytes, as GPU data sheets do.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * rows * cols * itemsize / seconds / 1e9


@exercise(
    "20.softmax_gbps",
    "softmax_gbps(rows, cols, seconds, dtype=torch.float32) -> float: the achieved GB/s of a row-wise softmax, "
    "counting the bytes it must read and write.",
    reference=_softmax_gbps,
)
def _test_softmax_gbps(candidate) -> None:
    cases = [
        (4096, 4096, 40e-6, torch.float32),
        (1, 1_000_000, 1e-3, torch.float32),
        (8192, 1024, 25e-6, torch.bfloat16),
        (100, 300, 2e-3, torch.float64),
    ]
    for rows, cols, seconds, dtype in cases:
        want = _softmax_gbps(rows, cols, seconds, dtype)
        try:
            got = float(candidate(rows, cols, seconds, dtype))
        except TypeError as err:
            raise AssertionError(f"call it as softmax_gbps(rows, cols, seconds, dtype); it raised TypeError: {err}") from None
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        where = f"for ({rows}, {cols}) {str(dtype).removeprefix('torch.')} in {seconds:g} s"
        ratio = got / want if want else float("nan")
        if math.isclose(ratio, 0.5, rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}, half the answer: the output is written too, so count the bytes twice (read + write)")
        if math.isclose(ratio, 1e9 / 2**30, rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}: that is GiB/s (2**30 bytes); GB/s divides by 1e9")
        if math.isclose(ratio, 8, rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}, 8x too much: count bytes, not bits")
        if dtype != torch.float32 and math.isclose(got, _softmax_gbps(rows, cols, seconds), rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}, as if every element took 4 bytes: use the dtype's size (torch.empty((), dtype=dtype).element_size())")
        if math.isclose(ratio, 1e3, rel_tol=1e-6) or math.isclose(ratio, 1e6, rel_tol=1e-6):
            raise AssertionError(f"{where} you returned {got:.4g}: seconds are already seconds (not ms or us)")
        raise AssertionError(f"{where} you returned {got:.4g}, want {want:.4g} = 2 * rows * cols * itemsize / seconds / 1e9")
