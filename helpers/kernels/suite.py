"""Correctness suite and throughput benchmark for the softmax ops.

Shared by chapter 20, ``tests/test_kernel_suite.py`` and ``benchmarks/softmax_gpu.py``,
so every GPU figure of the course comes from the same cases and the same arithmetic.
Every function takes the op and the device as parameters: on a machine without a GPU
the same logic runs on CPU ops (``torch.softmax``, ``helpers.kernels.softmax_cpu``, and
the deliberately broken kernels of :data:`BROKEN_KERNELS`), which is how CI shows that
the suite passes correct kernels and fails wrong ones.

**Correctness.** A float32 result is compared with ``torch.softmax`` of the same input
in float64. Two checks, each with a tolerance derived from float32 round-off
(unit round-off ``U = 2**-24``) for the row's width ``n``:

- every row must sum to 1 within :func:`row_sum_tolerance` ``= 2 U sqrt(n) + 16 U``. A
  float32 sum of ``n`` positive terms has a relative error of about ``U sqrt(n)``
  (random rounding errors add up like a random walk; measured: at most 0.7 ``U sqrt(n)``
  for a plain left-to-right sum, the worst order, on rows of 1,025 to 1,000,000); any
  error in the sum scales the whole row by the same factor, and this check sees it;
- every entry must satisfy ``|got - want| <= rtol * |want| + ATOL`` with
  ``rtol =`` :func:`relative_tolerance` ``= row_sum_tolerance(n) + 32 U`` (the sum's error plus
  the few roundings of ``x - max``, ``exp`` and the division) and a small absolute
  floor ``ATOL = 1e-12`` for entries so small (``exp(x - max) < 1e-12``) that their
  relative error is meaningless.

An absolute tolerance alone (the suite's first version used 1e-6) cannot work: on a
row of 1,000,000 every probability is about 1e-6, so a kernel that loses a partial sum
and is 0.1 % off everywhere still passes it (see ``tests/test_kernel_suite.py``).

**Cases.** The edge cases of the chapter (one column, huge magnitudes, ``-inf`` masks,
an all ``-inf`` row, a NaN in one row of the block path, a ``+inf`` entry, for which
``torch.softmax`` returns a NaN row because ``inf - inf`` is NaN, a row of a million) plus, seeded, widths around every switch
point of ``softmax_cuda.cu``'s fast kernel (:data:`SWITCH_POINTS`): a warp per row up to
1,024 columns, then a block per row of 256 threads up to 4,096, 512 up to 16,384 and
1,024 beyond; float4 loads only when ``cols % 4 == 0`` and both pointers are 16-byte
aligned, so each switch point is tried at widths of both kinds, and one case is a
contiguous view that starts one float into its buffer (misaligned: the scalar path).

**Throughput** is effective bandwidth: a softmax must read its input once and write its
output once, ``2 * rows * cols * itemsize`` bytes, and GB/s = bytes / seconds / 1e9.
``y.copy_(x)`` moves exactly the same bytes, so its GB/s is the practical ceiling for
a memory-bound op on that device.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import torch

__all__ = [
    "ATOL",
    "BENCH_SHAPES",
    "BROKEN_KERNELS",
    "NAIVE_MAX_COLS",
    "SWITCH_POINTS",
    "U",
    "benchmark",
    "check_rejections",
    "compare",
    "correctness",
    "correctness_cases",
    "fast_kernel_path",
    "gbps",
    "markdown_table",
    "relative_tolerance",
    "row_sum_tolerance",
    "softmax_bytes",
    "switch_point_widths",
]

INF = float("inf")

#: float32 unit round-off: the largest relative error of one rounding.
U = 2.0**-24
#: Absolute floor of the elementwise check (entries below it carry no relative precision worth testing).
ATOL = 1e-12

#: Widths at which softmax_fast changes its kernel or launch (read from helpers/kernels/softmax_cuda.cu;
#: tests/test_kernel_suite.py checks that these numbers are still the ones in the source).
#: A width equal to a switch point takes the first path, one more takes the second.
SWITCH_POINTS = {
    1024: "warp per row -> block per row (kWarpRowMax)",
    4096: "block of 256 threads -> 512",
    16384: "block of 512 threads -> 1024",
}

#: (rows, cols) of the benchmark; (4096, 4096) float32 is the headline shape.
BENCH_SHAPES = ((4096, 4096), (65536, 128), (16384, 1024), (1024, 32768), (8, 1_000_000))
#: The naive kernel walks a row with one thread; it is skipped on longer rows (minutes of waiting, nothing learnt).
NAIVE_MAX_COLS = 65536


def row_sum_tolerance(cols: int) -> float:
    """Largest accepted ``|sum(row) - 1|`` for a float32 softmax row of ``cols`` entries: ``2 U sqrt(cols) + 16 U``."""
    return 2 * U * math.sqrt(cols) + 16 * U


def relative_tolerance(cols: int) -> float:
    """Relative tolerance of each entry for a row of ``cols``: the row sum's error plus ``32 U`` for exp and division."""
    return row_sum_tolerance(cols) + 32 * U


def fast_kernel_path(cols: int, aligned: bool = True) -> str:
    """Which path of ``softmax_fast`` a row of ``cols`` float32 takes (see softmax_cuda.cu), in words."""
    vec = "float4" if cols % 4 == 0 and aligned else "scalar"
    if cols <= 1024:
        return f"warp per row, {vec}"
    threads = 256 if cols <= 4096 else (512 if cols <= 16384 else 1024)
    return f"block of {threads} per row, {vec}"


def switch_point_widths(seed: int = 0, random_per_point: int = 2, spread: int = 64) -> list[int]:
    """Widths around every switch point: ``s - 4, s - 1, s, s + 1, s + 4`` and, seeded, random ones within ``spread``.

    ``s`` and ``s +- 4`` are multiples of 4 (float4 path), ``s +- 1`` are not (scalar path), on both sides.
    """
    rng = random.Random(seed)
    widths = set()
    for s in SWITCH_POINTS:
        widths |= {s - 4, s - 1, s, s + 1, s + 4}
        widths |= {s + rng.randint(-spread, spread) for _ in range(random_per_point)}
    return sorted(widths)


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


def correctness_cases(device: str | torch.device = "cpu", seed: int = 0) -> dict[str, torch.Tensor]:
    """Named float32 inputs (rows, cols) that catch the usual softmax bugs, seeded: the same for the same seed.

    The edge cases, then 3 rows (not a multiple of the warp kernel's 4 rows per block) at each
    width of :func:`switch_point_widths`, then a misaligned contiguous view.
    """
    g = torch.Generator().manual_seed(seed)
    masked = torch.randn(64, 1000, generator=g)
    masked[:, 1::3] = -INF  # an attention-style mask
    one_finite = torch.full((4, 4096), -INF)
    one_finite[:, -1] = 0.0  # most threads see only -inf: their partial (m, d) = (-inf, 0) must merge without NaN
    with_nan = torch.randn(3, 4099, generator=g)
    with_nan[1, 2050] = math.nan  # one NaN in the middle row, on the block path: that row is NaN, the others are not
    with_inf = torch.randn(4, 2000, generator=g)
    with_inf[1, 7] = INF  # torch.softmax gives a NaN row here (inf - inf), and ordinary rows around it
    with_inf[3, [5, 1500]] = torch.tensor([INF, -INF])
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
        "NaN in a block-path row (3, 4099)": with_nan,
        "+inf entry (4, 2000): NaN row, like torch": with_inf,
    }
    for cols in switch_point_widths(seed):
        cases[f"width {cols} ({fast_kernel_path(cols)})"] = torch.randn(3, cols, generator=g) * 2
    cases = {k: v.to(device) for k, v in cases.items()}
    # Contiguous, cols % 4 == 0, but starting 4 bytes into its buffer: not 16-byte aligned, so the scalar path.
    buffer = (torch.randn(5 * 2048 + 1, generator=g) * 2).to(device)
    cases["misaligned view (5, 2048), scalar path"] = buffer[1:].view(5, 2048)
    return cases


def compare(got: torch.Tensor, x: torch.Tensor) -> dict:
    """Check ``got`` (a float32 softmax of ``x`` over the last dim) against ``torch.softmax`` in float64.

    Returns:
        ``nan_match`` (NaN exactly where the reference has NaN), ``max_abs_diff`` and
        ``max_rel_diff`` (over non-NaN entries; relative to the reference, entries below
        ATOL left out), ``worst_row_sum_err`` (largest ``|sum(row) - 1|`` over rows
        without NaN), ``rtol`` and ``sum_tol`` (the tolerances for this width),
        ``tol_used`` (the largest fraction of a tolerance used: above 1 means a failure) and ``ok``.
    """
    cols = x.shape[-1]
    want = torch.softmax(x.double(), dim=-1)
    got64 = got.double()
    rtol, sum_tol = relative_tolerance(cols), row_sum_tolerance(cols)
    nan_want = torch.isnan(want)
    nan_match = got.shape == want.shape and bool(torch.equal(torch.isnan(got64), nan_want))
    if not nan_match:
        return {"nan_match": False, "max_abs_diff": math.nan, "max_rel_diff": math.nan, "worst_row_sum_err": math.nan,
                "rtol": rtol, "sum_tol": sum_tol, "tol_used": math.inf, "ok": False}
    keep = ~nan_want
    err = (got64 - want).abs()[keep]
    ref = want[keep]
    max_abs = float(err.max()) if err.numel() else 0.0
    big = ref > ATOL
    max_rel = float((err[big] / ref[big]).max()) if big.any() else 0.0
    elem_used = float((err / (rtol * ref + ATOL)).max()) if err.numel() else 0.0
    full_rows = ~nan_want.any(dim=-1)
    sums = got64[full_rows].sum(dim=-1)
    worst_sum = float((sums - 1).abs().max()) if sums.numel() else 0.0
    used = max(elem_used, worst_sum / sum_tol)
    return {"nan_match": True, "max_abs_diff": max_abs, "max_rel_diff": max_rel, "worst_row_sum_err": worst_sum,
            "rtol": rtol, "sum_tol": sum_tol, "tol_used": used, "ok": bool(used <= 1.0)}


def correctness(fn: Callable[[torch.Tensor], torch.Tensor], device: str | torch.device, *,
                max_cols: int | None = None, seed: int = 0) -> list[dict]:
    """Run ``fn`` on every case of :func:`correctness_cases` and :func:`compare` the result.

    Args:
        fn: a softmax over the last dim of a 2-D float32 tensor on ``device``.
        device: where the inputs are made ("cpu", "cuda", ...).
        max_cols: leave out cases wider than this (the naive kernel is too slow on long rows).
        seed: seed of the random inputs and random widths.

    Returns:
        One dict per case: ``case``, ``shape`` and the keys of :func:`compare`.
    """
    results = []
    for label, x in correctness_cases(device, seed).items():
        if max_cols is not None and x.shape[1] > max_cols:
            continue
        results.append({"case": label, "shape": list(x.shape), **compare(fn(x), x)})
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


# ------------------------------------------------------------ negative controls --
# Softmax "kernels" with the bugs a hand-written GPU kernel really has, written with
# PyTorch ops so that they run on any device. The suite must fail each of them.


def _finish(e: torch.Tensor, d: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (e / d).to(x.dtype)


def lost_partial_sum(x: torch.Tensor, block: int = 4096) -> torch.Tensor:
    """Softmax whose row sum leaves out the last ``block``-wide piece of each longer row.

    The bug of a kernel that splits a long row over several blocks and merges the
    blocks' partial sums with an off-by-one loop. Rows of at most ``block`` are right.
    """
    x64 = x.double()
    m = x64.amax(dim=-1, keepdim=True)
    e = torch.exp(x64 - m)
    d = e.sum(dim=-1, keepdim=True)
    cols = x.shape[-1]
    if cols > block:
        last = (cols - 1) // block * block
        d = d - e[:, last:].sum(dim=-1, keepdim=True)
    return _finish(e, d, x)


def stale_max(x: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Online softmax over chunks that forgets to rescale the running sum when the maximum grows.

    The sum then holds ``exp(x - m_old)`` terms while the output uses the final maximum:
    rows whose maximum is not in their first chunk come out too small. Rows of at most
    ``chunk`` are right.
    """
    x64 = x.double()
    cols = x.shape[-1]
    pad = (-cols) % chunk
    xp = torch.nn.functional.pad(x64, (0, pad), value=-INF).view(x.shape[0], -1, chunk)
    running_max = torch.cummax(xp.amax(dim=-1), dim=-1).values  # the maximum seen after each chunk
    terms = torch.exp(xp - running_max.unsqueeze(-1))  # each chunk relative to the maximum *then*
    terms = torch.where((running_max == -INF).unsqueeze(-1), 0.0, terms)  # chunks that saw only -inf add 0
    d = terms.sum(dim=(-1, -2)).unsqueeze(-1)
    m = x64.amax(dim=-1, keepdim=True)
    return _finish(torch.exp(x64 - m), d, x)


def slightly_off(x: torch.Tensor, rel: float = 1e-5, min_cols: int = 1025) -> torch.Tensor:
    """The right softmax times ``1 + rel`` on rows of at least ``min_cols`` (the block path)."""
    y = torch.softmax(x.double(), dim=-1)
    if x.shape[-1] >= min_cols:
        y = y * (1 + rel)
    return y.to(x.dtype)


#: The negative controls: name -> function. The suite must fail every one (tests/test_kernel_suite.py).
BROKEN_KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "drops one block's partial sum": lost_partial_sum,
    "normalises with a stale max": stale_max,
    "1e-5 too large on rows > 1024": slightly_off,
}


# ------------------------------------------------------------------- benchmark --


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

        device: where the inputs are made ("cuda", or "cpu" for the same method on CPU ops).
        min_run_time: seconds of timed calls per measurement (helpers.bench.measure).

    Returns:
        One dict per (shape, op) including the copy: ``shape``, ``op``,
        ``median_us``, ``gbps``, ``of_copy`` (fraction of the copy's GB/s), and
        ``calls`` and ``blocks``, the samples the median rests on (see
        :class:`helpers.bench.Timing`).
    """
    from helpers.bench import measure

    rows_out = []
    for rows, cols in shapes:
        x = torch.randn(rows, cols, device=device)
        y = torch.empty_like(x)
        nbytes = softmax_bytes(rows, cols, x.element_size())
        copy = measure(lambda x=x, y=y: y.copy_(x), label="copy", min_run_time=min_run_time)
        copy_gbps = gbps(nbytes, copy.median_s)
        rows_out.append({"shape": [rows, cols], "op": "copy (y.copy_(x))", "median_us": copy.median_s * 1e6, "gbps": copy_gbps,
                         "of_copy": 1.0, "calls": copy.calls, "blocks": copy.blocks})
        for label, fn in ops.items():
            if "naive" in label and cols > NAIVE_MAX_COLS:
                continue
            t = measure(lambda fn=fn, x=x: fn(x), label=label, min_run_time=min_run_time)
            rate = gbps(nbytes, t.median_s)
            rows_out.append({"shape": [rows, cols], "op": label, "median_us": t.median_s * 1e6, "gbps": rate,
                             "of_copy": rate / copy_gbps, "calls": t.calls, "blocks": t.blocks})
        del x, y
    return rows_out


def markdown_table(rows: list[dict]) -> str:
    """The :func:`benchmark` rows as a markdown table, with the calls and blocks each median rests on."""
    lines = ["| shape | op | median (us) | GB/s | of copy | calls | blocks |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        shape = "x".join(str(s) for s in r["shape"])
        lines.append(f"| {shape} | {r['op']} | {r['median_us']:.1f} | {r['gbps']:.0f} | {r['of_copy']:.0%} | {r['calls']} | {r['blocks']} |")
    return "\n".join(lines)
