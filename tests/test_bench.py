"""helpers.bench: what it measures, not how fast this machine is."""

from __future__ import annotations

import time

import pytest
import torch

from helpers.bench import (
    MIN_BLOCKS,
    TARGET_BLOCKS,
    Timing,
    interleaved,
    measure,
    per_round_ratio,
    speedup,
    timing_table,
)


def test_measure_keeps_the_callers_thread_count():
    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        measure(lambda: seen.append(torch.get_num_threads()), min_run_time=0.01)
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {2}, f"torch.utils.benchmark's default of 1 thread leaked in: {set(seen)}"


def test_measure_warms_up_and_repeats():
    calls = []
    t = measure(lambda: calls.append(1), label="noop", min_run_time=0.01)
    assert len(calls) >= t.calls + 1 > 1  # one warm-up call at least, then the timed ones
    assert t.label == "noop" and t.median_s > 0 and t.iqr_s >= 0


def _counted_sleep(seconds: float):
    """(a list that grows by one per call, a function that sleeps ``seconds``)."""
    calls = []

    def sleep():
        calls.append(1)
        time.sleep(seconds)

    return calls, sleep


def test_a_slow_call_still_gets_min_blocks_samples():
    # 20 ms calls against a 50 ms budget: about 3 blocks would fit; min_blocks asks for 5.
    calls, slow = _counted_sleep(0.02)
    t = measure(slow, min_run_time=0.05)
    assert t.blocks >= MIN_BLOCKS == 5, f"the median rests on {t.blocks} blocks"
    assert t.calls >= t.blocks and len(calls) > t.calls  # warm-up calls are not counted
    assert 0.02 <= t.median_s < 0.2
    assert f"{t.calls} calls in {t.blocks} blocks" in str(t)
    with pytest.raises(ValueError, match="min_blocks"):
        measure(slow, min_run_time=0.05, min_blocks=MIN_BLOCKS - 1)


def test_a_few_millisecond_call_costs_about_min_run_time_not_several_times_it():
    # blocked_autorange alone picked 100-call blocks for a 2 ms call and took 0.76-0.86 s for 0.25 s.
    calls, call = _counted_sleep(0.002)
    t = measure(call, min_run_time=0.25)
    assert len(calls) == t.calls + 2, "two warm-up calls (one of them sizes the blocks), then the timed ones"
    assert MIN_BLOCKS <= t.blocks <= 3 * TARGET_BLOCKS, f"about TARGET_BLOCKS blocks expected, got {t.blocks}"
    # About min_run_time of timed calls (the median is not the mean), and far less than blocked_autorange's 0.76 s.
    assert 0.2 <= t.calls * t.median_s and t.calls * 0.002 < 0.45, f"{t.calls} calls of 2 ms for a 0.25 s budget"


def test_one_preempted_sizing_call_does_not_shrink_the_blocks():
    # The timed warm-up call (the second call) is 50x slow, as if the OS had preempted it: the first block (one
    # call) shows the 1 ms the call really takes, and the blocks are sized again, about 25 calls each for 0.25 s.
    calls = []

    def call():
        calls.append(1)
        time.sleep(0.05 if len(calls) == 2 else 0.001)

    t = measure(call, min_run_time=0.25)
    assert t.calls >= 10 * t.blocks, f"{t.calls} calls in {t.blocks} blocks: sized by the preempted call"
    assert len(calls) == t.calls + 3, "two warm-up calls and the one-call block that resized the blocks"
    assert t.calls * 0.001 < 0.45, f"{t.calls} calls of 1 ms for a 0.25 s budget"


def test_a_fast_call_uses_blocked_autorange_and_keeps_min_blocks():
    t = measure(lambda: torch.zeros(()), min_run_time=0.05)
    assert t.blocks >= MIN_BLOCKS and t.calls > 10 * t.blocks, f"{t.calls} calls in {t.blocks} blocks"


def test_a_sleep_is_measured_as_at_least_its_length():
    t = measure(lambda: time.sleep(0.002), min_run_time=0.05)
    assert t.median_s >= 0.002


def test_errors_surface_from_the_callers_code():
    def broken():
        raise ZeroDivisionError("inside fn")

    with pytest.raises(ZeroDivisionError, match="inside fn"):
        measure(broken)
    with pytest.raises(TypeError, match="lambda"):
        measure(42)
    with pytest.raises(ValueError, match="min_run_time"):
        measure(lambda: None, min_run_time=0)
    with pytest.raises(ValueError, match="num_threads"):
        measure(lambda: None, num_threads=0)


def test_speedup_and_table():
    slow, fast = Timing("slow", 2e-3, 1e-4, 10, 5), Timing("fast", 5e-4, 1e-5, 40, 8)
    assert speedup(slow, fast) == pytest.approx(4.0)
    table = timing_table([slow, fast])
    lines = table.splitlines()
    assert lines[0].split() == ["what", "median", "IQR", "calls", "blocks", "speed-up"]
    assert lines[1].split()[-3:] == ["10", "5", "1.00x"]
    assert lines[2].split()[-3:] == ["40", "8", "4.00x"] and "500 us" in lines[2]
    assert str(fast) == "fast: 500 us per call (IQR 10 us, 40 calls in 8 blocks)"
    with pytest.raises(ValueError):
        timing_table([])
    with pytest.raises(ValueError, match="non-positive"):
        speedup(slow, Timing("broken", 0.0, 0.0, 1, 1))


def test_interleaved_times_every_variant_once_per_round_alternating_the_order():
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    timings = interleaved(fns, rounds=3, min_run_time=0.01)
    assert list(timings) == ["a", "b"] and all(len(ts) == 3 for ts in timings.values())
    assert [t.label for t in timings["b"]] == ["b, round 1", "b, round 2", "b, round 3"]
    # Rounds a b | b a | a b: collapsing each run of calls (warm-up and timed) to one letter
    # merges the neighbours that repeat across a round boundary. In one fixed order it would be a b a b a b.
    runs = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert runs == ["a", "b", "a", "b"], runs
    with pytest.raises(ValueError, match="rounds"):
        interleaved(fns, rounds=0)
    with pytest.raises(ValueError, match="at least one"):
        interleaved({}, rounds=1)


def _timing(seconds):
    return Timing(label="", median_s=seconds, iqr_s=0.0, calls=1, blocks=5)


def test_per_round_ratio_is_the_median_of_same_round_ratios():
    # Round 2 is disturbed for "slow" only: the ratio of the two medians would be 30 / 10 = 3,
    # the per-round ratios are 2, 30 and 4, and their median is 4.
    timings = {"slow": [_timing(20), _timing(300), _timing(40)], "fast": [_timing(10), _timing(10), _timing(10)]}
    assert per_round_ratio(timings, "slow", "fast") == 4
    assert per_round_ratio({k: v[:2] for k, v in timings.items()}, "slow", "fast") == 2  # even: the lower middle
    with pytest.raises(KeyError, match="'fats' is not one of the timed variants"):
        per_round_ratio(timings, "slow", "fats")
    with pytest.raises(ValueError, match="same, non-zero number of rounds"):
        per_round_ratio({"slow": timings["slow"], "fast": timings["fast"][:2]}, "slow", "fast")
    with pytest.raises(ValueError, match="non-positive"):
        per_round_ratio({"slow": [_timing(1)], "fast": [_timing(0)]}, "slow", "fast")
