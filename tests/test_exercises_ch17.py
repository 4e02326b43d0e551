"""Exercises of chapter 17: realistic wrong answers fail with a hint."""

from __future__ import annotations

from helpers.exercises import check, solution
from tests.exercise_support import assert_rejected

# --------------------------------------------------------------------------
# 17.top_ops
# --------------------------------------------------------------------------


def test_top_ops_by_total_time_fails():
    def by_total(averages, k):
        return [e.key for e in sorted(averages, key=lambda e: e.cpu_time_total, reverse=True)[:k]]

    assert_rejected("17.top_ops", by_total, "self_cpu_time_total", "cpu_time_total")


def test_top_ops_by_average_per_call_fails():
    def by_average(averages, k):
        return [e.key for e in sorted(averages, key=lambda e: e.cpu_time_total / e.count, reverse=True)[:k]]

    assert_rejected("17.top_ops", by_average, "average")


def test_top_ops_ascending_fails():
    def ascending(averages, k):
        return [e.key for e in sorted(averages, key=lambda e: e.self_cpu_time_total)[:k]]

    assert_rejected("17.top_ops", ascending, "largest first")


def test_top_ops_returning_events_fails():
    def events(averages, k):
        return sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:k]

    assert_rejected("17.top_ops", events, ".key")


def test_top_ops_returning_pairs_fails():
    def pairs(averages, k):
        ranked = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:k]
        return [(e.key, e.self_cpu_time_total) for e in ranked]

    assert_rejected("17.top_ops", pairs, "only the names")


def test_top_ops_always_k_long_fails():
    def padded(averages, k):
        names = [e.key for e in sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)]
        return (names * k)[:k]

    assert_rejected("17.top_ops", padded, "fewer")


def test_top_ops_tuple_is_accepted():
    def as_tuple(averages, k):
        return tuple(solution("17.top_ops")(averages, k))

    assert check("17.top_ops", as_tuple, show=False).passed


# --------------------------------------------------------------------------
# 17.recorded_steps
# --------------------------------------------------------------------------

_reference = solution("17.recorded_steps")


def test_recorded_steps_ignoring_skip_first_fails():
    def no_skip(wait, warmup, active, repeat, skip_first, num_steps):
        return _reference(wait, warmup, active, repeat, 0, num_steps)

    assert_rejected("17.recorded_steps", no_skip, "skip_first")


def test_recorded_steps_repeat_zero_as_once_fails():
    def once(wait, warmup, active, repeat, skip_first, num_steps):
        return _reference(wait, warmup, active, repeat or 1, skip_first, num_steps)

    assert_rejected("17.recorded_steps", once, "repeat=0")


def test_recorded_steps_never_stopping_fails():
    def forever(wait, warmup, active, repeat, skip_first, num_steps):
        return _reference(wait, warmup, active, 0, skip_first, num_steps)

    assert_rejected("17.recorded_steps", forever, "stops recording")


def test_recorded_steps_counting_warmup_fails():
    def with_warmup(wait, warmup, active, repeat, skip_first, num_steps):
        return _reference(wait, 0, warmup + active, repeat, skip_first, num_steps)

    assert_rejected("17.recorded_steps", with_warmup, "warmup")


def test_recorded_steps_past_the_end_fails():
    def whole_cycles(wait, warmup, active, repeat, skip_first, num_steps):
        cycle = wait + warmup + active
        return _reference(wait, warmup, active, repeat, skip_first, num_steps + cycle)

    assert_rejected("17.recorded_steps", whole_cycles, "num_steps")


def test_recorded_steps_counting_from_one_fails():
    def one_based(wait, warmup, active, repeat, skip_first, num_steps):
        return [s + 1 for s in _reference(wait, warmup, active, repeat, skip_first, num_steps)]

    assert_rejected("17.recorded_steps", one_based, "recorded steps")


def test_recorded_steps_through_the_schedule_is_refused():
    from torch.profiler import ProfilerAction, schedule

    def by_schedule(wait, warmup, active, repeat, skip_first, num_steps):
        sched = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
        return [i for i in range(num_steps) if sched(i) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]

    assert_rejected("17.recorded_steps", by_schedule, "the schedule's arithmetic")


def test_recorded_steps_through_the_profiler_is_refused():
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    def by_profiler(wait, warmup, active, repeat, skip_first, num_steps):
        seen = set()

        def collect(prof):
            seen.update(int(e.trace_name.split("#")[1]) for e in prof.events() if e.trace_name.startswith("ProfilerStep#"))

        sched = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
        with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=collect) as prof:
            for _ in range(num_steps):
                torch.ones(2).add(1)
                prof.step()
        return sorted(s for s in seen if s < num_steps)

    assert_rejected("17.recorded_steps", by_profiler, "the schedule's arithmetic")
