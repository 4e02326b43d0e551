"""Correctness cases and the throughput benchmark for the softmax ops.

Shared by chapter 20's GPU cells, ``tests/test_kernels.py`` users and
``benchmarks/softmax_gpu.py``, so every GPU figure of the course comes from
the same cases and the same arithmetic.

Throughput is reported as effective bandwidth: a softmax must read its input
once and write its output once, ``2 * rows * cols * itemsize`` bytes, and
GB/s = those bytes / seconds / 1e9. ``y.copy_(x)`` moves exactly the same
bytes, so its GB/s is the practical ceiling for a memory-bound op on that
device.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = [
    "BENCH_SHAPES",
    "benchmark",
    "check_rejections",
    "correctness",
    "correctness_cases",
    "gbps",
    "markdown_table",
    "softmax_bytes",
]

INF = float("inf")

#: (rows, cols) of the benchmark; (4096, 4096) float32 is the headline shape.
BENCH_SHAPES = ((4096, 4096), (65536, 128), (16384, 1024), (1024, 32768), (8, 1_000_000))
#: The naive kernel walks a row with one thread; it is skipped on longer rows (minutes of waiting, nothing learnt).
NAIVE_MAX_COLS = 65536


def softmax_bytes(rows: int, cols: int, itemsize: int = 4) -> int:
    """Bytes a softmax of a (rows, cols) tensor must move: read every element once, write it once."""
    if rows < 1 or cols < 1 or itemsize < 1:
        raise ValueError(f"rows, cols and itemsize must be positive, got {rows}, {cols}, {itemsize}")
    return 2 * rows * cols * itemsize


def gbps(nbytes: int, seconds: float) -> float:
    """Effective bandwidth in GB/s (1e9 bytes per second)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds / 1e9


def correctness_cases(device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Named float32 inputs that catch the usual softmax bugs (seeded: the same every call)."""
    g = torch.Generator().manual_seed(0)
    masked = torch.randn(64, 1000, generator=g)
    masked[:, 1::3] = -INF  # an attention-style mask
    one_finite = torch.full((4, 4096), -INF)
    one_finite[:, -1] = 0.0  # most threads see only -inf: their partial (m, d) = (-inf, 0) must merge without NaN
    cases = {
        "one column (64, 1)": torch.randn(64, 1, generator=g),
        "short odd rows (1000, 7)": torch.randn(1000, 7, generator=g),
        "warp per row, float4 (513, 1024)": torch.randn(513, 1024, generator=g),
        "block per row, float4 (64, 4096)": torch.randn(64, 4096, generator=g),
        "block per row, scalar (33, 4099)": torch.randn(33, 4099, generator=g),
        "one very long row (1, 1000000)": torch.randn(1, 1_000_000, generator=g),
        "huge magnitudes +-1e30, +-3e38": torch.tensor([[1e30, -1e30, 0.0, 3e38, -3e38, 5.0, 1.0, -2.0]] * 4),
        "-inf masks (64, 1000)": masked,
        "one finite entry, rest -inf (4, 4096)": one_finite,
        "an all -inf row (NaN, like torch)": torch.full((2, 40), -INF),
    }
    return {k: v.to(device) for k, v in cases.items()}


def correctness(fn: Callable[[torch.Tensor], torch.Tensor], device: str | torch.device, *, max_cols: int | None = None) -> list[dict]:
    """Compare ``fn`` with ``torch.softmax`` on :func:`correctness_cases`.

    NaN must appear exactly where torch.softmax has NaN; elsewhere the largest
    absolute difference must be at most 1e-6 (float32 round-off on values in [0, 1]).

    Returns:
        One dict per case: ``case``, ``shape``, ``max_abs_diff`` (over non-NaN
        entries), ``nan_match`` and ``ok``. Cases wider than ``max_cols`` are left out.
    """
    results = []
    for label, x in correctness_cases(device).items():
        if max_cols is not None and x.shape[1] > max_cols:
            continue
        got, want = fn(x), torch.softmax(x, dim=-1)
        nan_match = bool(torch.equal(torch.isnan(got), torch.isnan(want)))
        keep = ~torch.isnan(want)
        diff = float((got[keep] - want[keep]).abs().max()) if keep.any() else 0.0
        results.append(
            {"case": label, "shape": list(x.shape), "max_abs_diff": diff, "nan_match": nan_match,
             "ok": nan_match and diff <= 1e-6 and not math.isnan(diff)}
        )
    return results


def check_rejections(fn: Callable[[torch.Tensor], torch.Tensor], device: str | torch.device) -> list[dict]:
    """Call ``fn`` on inputs it must refuse; each must raise RuntimeError naming the problem.

    Returns:
        One dict per bad input: ``input``, ``message`` (first line) and ``ok``.
    """
    x = torch.randn(8, 16, device=device)
    other = "cpu" if torch.device(device).type != "cpu" else "meta"
    bad = [
        ("transposed (non-contiguous)", x.t(), "contiguous"),
        ("float16", x.half(), "got float16"),
        (f"on {other}", x.to(other), "tensor on"),
        ("1-D", x[0], "2-D"),
        ("empty", x[:0], "non-empty"),
    ]
    results = []
    for label, tensor, word in bad:
        try:
            fn(tensor)
            message, ok = "accepted (no error)", False
        except RuntimeError as err:
            message = str(err).splitlines()[0]
            ok = word in message
        results.append({"input": label, "message": message, "ok": ok})
    return results


def benchmark(
    ops: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    shapes=BENCH_SHAPES,
    device: str | torch.device = "cuda",
    min_run_time: float = 0.3,
) -> list[dict]:
    """Time each op and ``y.copy_(x)`` on float32 inputs of each shape.

    Args:
        ops: label -> function, e.g. ``{"torch.softmax": ..., "fast": ...}``. A
            label containing "naive" is skipped on rows longer than NAIVE_MAX_COLS.
        shapes: (rows, cols) pairs.

    Returns:
        One dict per (shape, op) including the copy: ``shape``, ``op``,
        ``median_us``, ``gbps`` and ``of_copy`` (fraction of the copy's GB/s).
    """
    from helpers.bench import measure

    rows_out = []
    for rows, cols in shapes:
        x = torch.randn(rows, cols, device=device)
        y = torch.empty_like(x)
        nbytes = softmax_bytes(rows, cols, x.element_size())
        copy = measure(lambda x=x, y=y: y.copy_(x), label="copy", min_run_time=min_run_time)
        copy_gbps = gbps(nbytes, copy.median_s)
        rows_out.append({"shape": [rows, cols], "op": "copy (y.copy_(x))", "median_us": copy.median_s * 1e6, "gbps": copy_gbps, "of_copy": 1.0})
        for label, fn in ops.items():
            if "naive" in label and cols > NAIVE_MAX_COLS:
                continue
            t = measure(lambda fn=fn, x=x: fn(x), label=label, min_run_time=min_run_time)
            rate = gbps(nbytes, t.median_s)
            rows_out.append({"shape": [rows, cols], "op": label, "median_us": t.median_s * 1e6, "gbps": rate, "of_copy": rate / copy_gbps})
        del x, y
    return rows_out


def markdown_table(rows: list[dict]) -> str:
    """The :func:`benchmark` rows as a markdown table."""
    lines = ["| shape | op | median (us) | GB/s | of copy |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        shape = "x".join(str(s) for s in r["shape"])
        lines.append(f"| {shape} | {r['op']} | {r['median_us']:.1f} | {r['gbps']:.0f} | {r['of_copy']:.0%} |")
    return "\n".join(lines)
