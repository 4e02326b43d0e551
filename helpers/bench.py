"""Honest timings for the chapters that measure speed.

Every speed claim in the course comes from :func:`measure`, a thin layer over
``torch.utils.benchmark.Timer``. That timer already does what a fair
benchmark needs: it runs the code a few times before timing it (warm-up: lazy
initialisation, caches, compiled kernels), synchronises the accelerator before
reading the clock (CUDA kernels are asynchronous, so an unsynchronised timer
measures only the launch), and repeats the measurement in blocks so that the
median is stable. This module adds these things on top:

- it keeps the current thread count (``Timer`` defaults to **one** thread,
  which silently makes CPU results look several times slower than the rest of
  the notebook);
- it times at least :data:`MIN_BLOCKS` blocks. ``blocked_autorange`` stops
  once ``min_run_time`` has passed, so a call slower than a fifth of it gets
  fewer than five blocks (one, for a call slower than ``min_run_time``), and a
  "median" of one block is a single sample with no spread at all;
- it sizes the blocks itself for calls slower than a thousandth of
  ``min_run_time``: a fixed number of calls per block, from a timed warm-up
  call, for about :data:`TARGET_BLOCKS` blocks. ``blocked_autorange``'s own
  search (blocks of 1, 10, 100, ... calls until the timer's overhead is
  under 1e-4 of a block) made a 2-20 ms call cost two to three times
  ``min_run_time``. Its blocks are timed with the same synchronisation;
- it returns a small :class:`Timing` with the median, the spread, and how many
  blocks and calls they rest on;
- :func:`speedup` and :func:`timing_table` turn timings into the ratios and
  the table the notebooks print;
- :func:`interleaved` and :func:`per_round_ratio` compare variants on a
  shared machine: timed one after the other, a burst of load from another
  process can land on one variant and not the other and move their ratio
  several-fold, so each round times every variant once and a ratio is the
  median of the per-round ratios.

Example::

    from helpers.bench import measure, speedup
    eager = measure(lambda: model(x), label="eager")
    compiled = measure(lambda: compiled_model(x), label="compiled")
    print(timing_table([eager, compiled]))
    print(f"{speedup(eager, compiled):.2f}x")
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from .bars import bar
from .device import import_without_cuda_home_log

# Its import logs a harmless CUDA_HOME line on GPU-less machines with a CUDA toolkit.
benchmark = import_without_cuda_home_log("torch.utils.benchmark")
TaskSpec = benchmark.utils.common.TaskSpec

__all__ = ["MIN_BLOCKS", "Timing", "interleaved", "measure", "per_round_ratio", "speedup", "timing_table"]

TARGET_BLOCKS = 10
"""How many blocks :func:`measure` aims for with a call slower than a thousandth of ``min_run_time``."""

MIN_BLOCKS = 5
"""The fewest timed blocks :func:`measure` accepts: with five, the quartiles
(and so the IQR) come from five different samples, and one outlier cannot move
the median."""


@dataclass(frozen=True)
class Timing:
    """One measured piece of code.

    Attributes:
        label: what was timed, e.g. ``"eager"``.
        median_s: median seconds per call.
        iqr_s: interquartile range of the per-call times, in seconds (the
            spread: a large value relative to ``median_s`` means a noisy
            machine).
        calls: how many timed calls the median is over (warm-up excluded).
        blocks: how many timed blocks those calls ran in. Each block times
            ``calls / blocks`` calls in a row and contributes one per-call
            sample, so the median and IQR are over ``blocks`` samples.
    """

    label: str
    median_s: float
    iqr_s: float
    calls: int
    blocks: int

    @property
    def median_ms(self) -> float:
        """Median milliseconds per call."""
        return self.median_s * 1e3

    def __str__(self) -> str:
        return (f"{self.label}: {_human(self.median_s)} per call "
                f"(IQR {_human(self.iqr_s)}, {self.calls} calls in {self.blocks} blocks)")


def _human(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def measure(
    fn: Callable[[], object],
    *,
    label: str = "",
    min_run_time: float = 0.5,
    num_threads: int | None = None,
    min_blocks: int = MIN_BLOCKS,
) -> Timing:
    """Time ``fn()`` with warm-up, accelerator synchronisation and repeats.

    Args:
        fn: a callable with no arguments (wrap arguments in a ``lambda``).
            It should do the same work on every call.
        label: a name for tables and messages.
        min_run_time: seconds of timed runs to collect, after the warm-up
            (for calls faster than ``min_run_time / 1000``, by
            ``torch.utils.benchmark.Timer.blocked_autorange``). More gives a
            steadier median; 0.2–1 s is enough for most cells.
        num_threads: CPU threads during the measurement. ``None`` (the
            default) keeps ``torch.get_num_threads()``, so the timing matches
            what the rest of the notebook experiences.
        min_blocks: the fewest timed blocks (samples of the median). When
            ``min_run_time`` ran out first, more blocks are timed until there
            are this many, so a slow ``fn`` costs at least ``min_blocks``
            calls plus two warm-up calls (plus one block, if the timed warm-up
            call was over 4x slower than the first block's calls and the blocks
            are sized again). At least :data:`MIN_BLOCKS`.

    Returns:
        A :class:`Timing` (seconds per call).

    Raises:
        TypeError: ``fn`` is not callable.
        ValueError: ``min_run_time`` is not positive, ``num_threads`` < 1, or
            ``min_blocks`` < :data:`MIN_BLOCKS`.
        Whatever ``fn`` raises, unchanged, during the warm-up call.
    """
    if not callable(fn):
        raise TypeError(f"measure() needs a callable with no arguments, got {type(fn).__name__}; wrap it: measure(lambda: f(x))")
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be positive seconds, got {min_run_time!r}")
    threads = torch.get_num_threads() if num_threads is None else num_threads
    if threads < 1:
        raise ValueError(f"num_threads must be at least 1, got {threads}")
    if min_blocks < MIN_BLOCKS:
        raise ValueError(f"min_blocks must be at least {MIN_BLOCKS} (a median of fewer blocks is not robust), got {min_blocks}")
    fn()  # fail fast, with the caller's own traceback, before the timer's machinery
    estimate = _block_seconds(fn, 1, threads)  # a second warm-up call, timed: sizes the blocks
    if estimate < min_run_time / 1000:
        # Microseconds per call: blocked_autorange grows the block (1, 10, 100, ... calls) until
        # the timer's own overhead is negligible, then times blocks until min_run_time has passed.
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads, label=label)
        parts = [timer.blocked_autorange(min_run_time=min_run_time)]
        number, task = max(1, int(min_run_time / min_blocks / parts[0].median)), parts[0].task_spec
    else:
        # Slower calls: blocked_autorange would pick blocks of 10 or 100 calls to make the overhead
        # of a timer reading (about a microsecond) under 1e-4 of a block, and its search for that
        # size plus its blocks then cost several times min_run_time for a 2-20 ms call. Here
        # a block is a fixed number of calls, about min_run_time / TARGET_BLOCKS long.
        parts, number = [], max(1, int(min_run_time / TARGET_BLOCKS / estimate))
        task = TaskSpec(stmt="fn()", setup="pass", label=label, num_threads=threads)
    have = sum(len(m.raw_times) for m in parts)
    budget = 0.0 if parts else min_run_time  # blocked_autorange has already spent min_run_time
    raw: list[float] = []
    spent = 0.0
    while have + len(raw) < min_blocks or spent < budget:
        raw.append(_block_seconds(fn, number, threads))
        spent += raw[-1]
        if not parts and len(raw) == 1 and raw[0] < number * estimate / 4:
            # The sizing call was over 4x slower than the calls of this first block: the OS had preempted it,
            # say. Size the blocks again from this block, and count it as warm-up.
            estimate, number = raw[0] / number, max(1, int(min_run_time / TARGET_BLOCKS / (raw[0] / number)))
            raw, spent = [], 0.0
    if raw:
        parts.append(benchmark.Measurement(number_per_run=number, raw_times=raw, task_spec=task))
    blocks = sum(len(m.raw_times) for m in parts)
    calls = sum(len(m.raw_times) * m.number_per_run for m in parts)
    # merge() turns every block into one per-call sample (time / calls in the block).
    (merged,) = benchmark.Measurement.merge(parts) if len(parts) > 1 else parts
    return Timing(label=label, median_s=merged.median, iqr_s=merged.iqr, calls=calls, blocks=blocks)


def _sync() -> None:
    """Wait for the accelerator's queued work, as ``torch.utils.benchmark``'s timer does before each reading."""
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()


def _block_seconds(fn: Callable[[], object], number: int, threads: int) -> float:
    """Seconds for ``number`` calls of ``fn`` in a row on ``threads`` CPU threads, synchronised at both ends, with
    the garbage collector off (as in ``timeit``)."""
    previous, collecting = torch.get_num_threads(), gc.isenabled()
    torch.set_num_threads(threads)
    gc.disable()  # as timeit (and so blocked_autorange) does while it times
    try:
        _sync()
        start = time.perf_counter()
        for _ in range(number):
            fn()
        _sync()
        return time.perf_counter() - start
    finally:
        if collecting:
            gc.enable()
        torch.set_num_threads(previous)


def speedup(baseline: Timing, candidate: Timing) -> float:
    """How many times faster ``candidate`` is than ``baseline`` (median over median; > 1 is faster)."""
    if candidate.median_s <= 0:
        raise ValueError(f"{candidate.label or 'candidate'} has a non-positive median time {candidate.median_s}")
    return baseline.median_s / candidate.median_s


def timing_table(timings: Sequence[Timing], *, baseline: Timing | None = None) -> str:
    """A plain-text table of ``timings``: label, median, IQR, sample counts, and speed-up over ``baseline``.

    The ``calls`` column is the number of timed calls and ``blocks`` the
    number of samples the median and IQR are taken over.

    ``baseline`` defaults to the first timing. Returns the table as a string
    (print it); raises ``ValueError`` for an empty list.
    """
    if not timings:
        raise ValueError("timing_table() needs at least one Timing")
    base = baseline or timings[0]
    width = max(len("what"), *(len(t.label) for t in timings))
    lines = [f"{'what':<{width}}  {'median':>10}  {'IQR':>10}  {'calls':>7}  {'blocks':>6}  {'speed-up':>8}"]
    for t in timings:
        lines.append(f"{t.label:<{width}}  {_human(t.median_s):>10}  {_human(t.iqr_s):>10}  "
                     f"{t.calls:>7}  {t.blocks:>6}  {speedup(base, t):>7.2f}x")
    return "\n".join(lines)


def interleaved(
    fns: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    min_run_time: float = 0.25,
) -> dict[str, list[Timing]]:
    """Time every callable in ``fns`` once per round, for ``rounds`` rounds.

    Within a round the variants are timed back to back, in the order of
    ``fns`` in even rounds (0, 2, ...) and in reverse order in odd ones, so
    no variant always runs first or always follows the same neighbour.
    Every variant therefore sees the machine at nearly the same moments as
    the others, which is what makes :func:`per_round_ratio` robust to load
    from other processes.

    Args:
        fns: name -> callable with no arguments, e.g.
            ``{"eager": lambda: model(x), "compiled": lambda: cmodel(x)}``.
        rounds: how many rounds; an odd count gives :func:`per_round_ratio`
            a true middle value. At least 1.
        min_run_time: seconds of timed runs per variant per round, passed to
            :func:`measure` (each variant costs about ``rounds`` times this).

    Returns:
        name -> list of ``rounds`` :class:`Timing` (seconds per call), in
        round order; each label is ``"<name>, round <r>"`` (r from 1).

    Raises:
        ValueError: ``fns`` is empty or ``rounds`` < 1.
        Whatever a callable raises (see :func:`measure`).
    """
    if not fns:
        raise ValueError("interleaved() needs at least one name -> callable in fns")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds!r}")
    names = list(fns)
    timings: dict[str, list[Timing]] = {name: [] for name in names}
    for r in bar(range(rounds), desc="timing rounds", unit="round"):
        for name in names if r % 2 == 0 else reversed(names):
            timings[name].append(measure(fns[name], label=f"{name}, round {r + 1}", min_run_time=min_run_time))
    return timings


def per_round_ratio(timings: Mapping[str, Sequence[Timing]], numerator: str, denominator: str) -> float:
    """The median over rounds of ``numerator``'s median time / ``denominator``'s, each pair from one round.

    With ``numerator`` the baseline and ``denominator`` the candidate, this
    is the candidate's speed-up (> 1 is faster), as :func:`speedup` but over
    rounds. For an even number of rounds it is the lower of the two middle
    ratios, so it is always one round's ratio.

    Args:
        timings: what :func:`interleaved` returned.
        numerator, denominator: two of its names.

    Raises:
        KeyError: a name is not in ``timings`` (the message lists the names).
        ValueError: the two lists differ in length or are empty, or a
            denominator time is not positive.
    """
    for name in (numerator, denominator):
        if name not in timings:
            raise KeyError(f"{name!r} is not one of the timed variants {sorted(timings)}")
    tops, bottoms = timings[numerator], timings[denominator]
    if not tops or len(tops) != len(bottoms):
        raise ValueError(f"{numerator!r} and {denominator!r} need the same, non-zero number of rounds; "
                         f"got {len(tops)} and {len(bottoms)}")
    if any(b.median_s <= 0 for b in bottoms):
        raise ValueError(f"{denominator!r} has a non-positive median time in some round")
    ratios = sorted(a.median_s / b.median_s for a, b in zip(tops, bottoms))
    return ratios[(len(ratios) - 1) // 2]
