"""Exercises of chapter 17 (the profiler): reading ``key_averages()`` and predicting a schedule."""

from __future__ import annotations

import warnings

import torch
from torch.autograd.profiler_util import EventList, FunctionEventAvg
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from . import exercise

# --------------------------------------------------------------------------
# 17.top_ops
# --------------------------------------------------------------------------


def _top_ops(averages, k: int) -> list[str]:
    """Names of the ``k`` entries of ``averages`` with the largest self CPU time, largest first.

    Args:
        averages: what ``prof.key_averages()`` returns (an ``EventList`` of
            ``FunctionEventAvg``, each with ``.key`` and ``.self_cpu_time_total``
            in microseconds).
        k: how many names to return; all of them when there are fewer.

    Returns:
        A list of ``str``: the ``.key`` of each entry, sorted by
        ``.self_cpu_time_total`` from largest to smallest.
    """
    return [e.key for e in sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:k]]


def _real_averages():
    """key_averages() of a small real profile: a label around matrix products, activations and sums."""
    a = torch.randn(96, 96, generator=torch.Generator().manual_seed(0))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("outer label"):
            for _ in range(3):
                b = a @ a
                b = torch.relu(b)
                b.sum()
    return prof.key_averages()


def _synthetic_averages():
    """An EventList where total time, average time per call and self time each give a different order."""
    rows = [  # name, calls, self CPU us, CPU total us
        ("my_model.forward", 1, 500.0, 9000.0),  # a label: large total, little self time
        ("aten::addmm", 100, 3000.0, 3200.0),  # many cheap calls: large self total, small average
        ("aten::conv2d", 2, 2500.0, 5200.0),  # few expensive calls: large average
        ("aten::relu", 10, 400.0, 400.0),
        ("aten::copy_", 40, 1200.0, 1200.0),
    ]
    events = []
    for name, count, self_us, total_us in rows:
        e = FunctionEventAvg()
        e.key, e.count = name, count
        e.self_cpu_time_total, e.cpu_time_total = self_us, total_us
        events.append(e)
    return EventList(events)


def _names(result, k) -> list[str]:
    if result is None:
        raise AssertionError("return the list of names (your function returned None)")
    try:
        items = list(result)
    except TypeError as exc:
        raise AssertionError(f"return a list of names (str); got {type(result).__name__}") from exc
    for item in items:
        if isinstance(item, FunctionEventAvg):
            raise AssertionError("return the names (each entry's .key), not the FunctionEventAvg objects")
        if isinstance(item, tuple) and item and isinstance(item[0], str):
            raise AssertionError("return only the names (each entry's .key), not (name, time) pairs")
        if not isinstance(item, str):
            raise AssertionError(f"return a list of str (each entry's .key); found {item!r}")
    return items


@exercise(
    "17.top_ops",
    "given prof.key_averages() and k, return the names (.key) of the k entries with the largest self CPU "
    "time (.self_cpu_time_total), largest first (all of them if there are fewer than k).",
    reference=_top_ops,
    hint="Sort the entries by self CPU time, which leaves out the time of the operators called inside "
         "(cpu_time_total includes it, so a record_function label comes out on top), largest first, as 'A "
         "first profile' explains. Keep the first k and return their .key strings, not the event objects; "
         "a slice past the end of a list simply gives all of it.",
)
def _test_top_ops(candidate) -> None:
    for source, averages in (("a synthetic table", _synthetic_averages()), ("a real profile", _real_averages())):
        self_time = {e.key: e.self_cpu_time_total for e in averages}
        for k in (3, 1, len(averages) + 5):
            want = _top_ops(averages, k)
            got = _names(candidate(averages, k), k)
            if [self_time.get(n) for n in got] == [self_time[n] for n in want] and set(got) <= set(self_time):
                if len(set(got)) == len(got):
                    continue  # equal self times may come in any order
            by_total = [e.key for e in sorted(averages, key=lambda e: e.cpu_time_total, reverse=True)[:k]]
            by_average = [e.key for e in sorted(averages, key=lambda e: e.cpu_time_total / max(e.count, 1), reverse=True)[:k]]
            ascending = [e.key for e in sorted(averages, key=lambda e: e.self_cpu_time_total)[:k]]
            if got == by_total and got != want:
                raise AssertionError(
                    f"{source}, k={k}: you sorted by cpu_time_total, which includes the time of the operators "
                    f"called inside (a label such as {by_total[0]!r} contains everything). Sort by "
                    f"self_cpu_time_total; expected {want}"
                )
            if got == by_average and got != want:
                raise AssertionError(
                    f"{source}, k={k}: you sorted by the average time per call; an operator called 100 times "
                    f"can cost more in all. Sort by self_cpu_time_total; expected {want}"
                )
            if got == ascending and got != want:
                raise AssertionError(f"{source}, k={k}: largest first, please (sort with reverse=True); expected {want}")
            if len(got) != len(want):
                raise AssertionError(
                    f"{source}, k={k}: expected {len(want)} names (k, or all entries if there are fewer), got {len(got)}"
                )
            raise AssertionError(f"{source}, k={k}: expected {want}, got {got}")


# --------------------------------------------------------------------------
# 17.recorded_steps
# --------------------------------------------------------------------------


def _recorded_steps(wait: int, warmup: int, active: int, repeat: int, skip_first: int, num_steps: int) -> list[int]:
    """Steps recorded by ``torch.profiler.schedule(wait, warmup, active, repeat, skip_first)``.

    Args:
        wait, warmup, active, repeat, skip_first: as for ``torch.profiler.schedule``
            (``repeat=0``: cycle until the loop ends).
        num_steps: iterations of a loop that calls ``prof.step()`` at the end of each.

    Returns:
        The sorted step numbers, counting from 0, below ``num_steps``, whose
        schedule action is RECORD or RECORD_AND_SAVE: after ``skip_first``
        steps, each cycle of ``wait + warmup + active`` steps records its last
        ``active``; after ``repeat`` cycles (if ``repeat > 0``) nothing more.
    """
    cycle = wait + warmup + active
    steps = []
    for step in range(skip_first, num_steps):
        k = step - skip_first
        if repeat and k // cycle >= repeat:
            break
        if k % cycle >= wait + warmup:
            steps.append(step)
    return steps


def _profiled_steps(wait, warmup, active, repeat, skip_first, num_steps) -> list[int]:
    """The steps the real profiler records, read from its ProfilerStep#N events."""
    seen: set[int] = set()

    def collect(prof):
        seen.update(int(e.trace_name.split("#")[1]) for e in prof.events() if e.trace_name.startswith("ProfilerStep#"))

    a = torch.ones(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warmup=0 warns that results may be skewed
        sched = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
        with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=collect) as prof:
            for _ in range(num_steps):
                a.add(1)
                prof.step()
    return sorted(s for s in seen if s < num_steps)  # the final step() opens an empty step num_steps


def _as_steps(result, args) -> list[int]:
    if result is None:
        raise AssertionError(f"return a list of step numbers (your function returned None for {args})")
    try:
        items = list(result)
    except TypeError as exc:
        raise AssertionError(f"return a list of ints; got {type(result).__name__} for {args}") from exc
    out = []
    for item in items:
        if isinstance(item, torch.Tensor) and item.numel() == 1:
            item = item.item()
        if isinstance(item, bool) or not isinstance(item, int):
            raise AssertionError(f"return step numbers as ints; found {item!r} for {args}")
        out.append(item)
    return out


@exercise(
    "17.recorded_steps",
    "return the sorted step numbers (from 0) that schedule(wait, warmup, active, repeat, skip_first) "
    "records in a loop of num_steps iterations calling prof.step() at the end of each.",
    reference=_recorded_steps,
    # The schedule itself (the chapter shows how to read its actions) and the profiler that runs it.
    shortcuts=("torch.profiler.schedule", "torch.profiler.profiler._default_schedule_fn", "torch.profiler.profile"),
    goal="the schedule's arithmetic",
    hint="Go through the steps 0 to num_steps - 1: after the skip_first steps, work out which cycle of "
         "wait + warmup + active steps a step falls in and where inside it; only the last active positions "
         "of a cycle are recorded, warmup runs the profiler without recording, and with repeat > 0 nothing "
         "is recorded after that many cycles. The schedule section prints each step's action for "
         "comparison.",
)
def _test_recorded_steps(candidate) -> None:
    cases = [  # wait, warmup, active, repeat, skip_first, num_steps
        (1, 1, 2, 2, 0, 12),  # two full cycles, then off
        (1, 1, 2, 0, 0, 11),  # repeat=0: until the end
        (2, 1, 2, 0, 3, 15),  # skip_first
        (0, 1, 3, 1, 0, 6),  # no wait
        (1, 2, 1, 3, 2, 20),
        (1, 1, 3, 0, 0, 8),  # the loop ends inside an active phase
        (2, 0, 1, 2, 1, 9),  # no warmup
        (3, 1, 2, 1, 0, 3),  # the loop ends before anything is recorded
    ]
    for args in cases:
        want = _profiled_steps(*args)
        got = _as_steps(candidate(*args), args)
        if got == want:
            continue
        wait, warmup, active, repeat, skip_first, num_steps = args
        label = (f"schedule(wait={wait}, warmup={warmup}, active={active}, repeat={repeat}, "
                 f"skip_first={skip_first}) over {num_steps} steps")
        if skip_first and got == _recorded_steps(wait, warmup, active, repeat, 0, num_steps):
            raise AssertionError(f"{label}: the first skip_first steps are ignored once, before the first cycle; "
                                 f"the profiler recorded {want}, you returned {got}")
        if repeat == 0 and got == _recorded_steps(wait, warmup, active, 1, skip_first, num_steps):
            raise AssertionError(f"{label}: repeat=0 means the cycle repeats until the loop ends; "
                                 f"the profiler recorded {want}, you returned {got}")
        if repeat and got == _recorded_steps(wait, warmup, active, 0, skip_first, num_steps):
            raise AssertionError(f"{label}: after repeat={repeat} cycles the profiler stops recording; "
                                 f"the profiler recorded {want}, you returned {got}")
        if warmup and got == _recorded_steps(wait, 0, active + warmup, repeat, skip_first, num_steps):
            raise AssertionError(f"{label}: warmup steps run the profiler but are not recorded; "
                                 f"the profiler recorded {want}, you returned {got}")
        if [s for s in got if s < num_steps] == want:
            raise AssertionError(f"{label}: only steps below num_steps exist; the profiler recorded {want}, "
                                 f"you returned {got}")
        raise AssertionError(f"{label}: the profiler recorded steps {want}, you returned {got}")
