"""Root pytest plugin: scheduling of the slow notebook tests, and what each costs.

Scheduling (``make test`` runs ``pytest -n 2 --dist loadfile --no-loadscope-reorder``):
under ``--dist loadfile`` this plugin gives xdist a scheduler of its own,

- which keeps each file's tests on one worker, in order, as ``loadfile``
  does, so the cells of one notebook (nbval items) run in one kernel;
- except the papermill smoke runs, which become one group per notebook, so
  they spread over the workers instead of running one after another on one;
- and the groups are handed out longest first, by the seconds recorded in
  ``tests/test_seconds.json`` (longest-processing-time-first scheduling), so
  no worker is left with a long notebook at the end while the other idles.
  (``--no-loadscope-reorder`` stops xdist re-sorting them by test count.)

xdist's own ``--dist loadgroup`` cannot do this with pytest 9: it tags node
ids through ``item._nodeid``, which pytest 9 no longer reads.

Sharding, for a suite spread over several CI machines: ``make test SHARD=k/N``
(``pytest --shard k/N``) keeps the k-th of N shares. Each notebook (its nbval
and smoke runs together) is on exactly one shard, and so is each other test file;
the shares are balanced by the same recorded seconds (:func:`shard_plan`).

Kernels: every kernel nbval and papermill start is forked from a warm parent
that has imported torch, torchvision and matplotlib once (tests/kernel_zygote.py;
``COURSE_TEST_ZYGOTE=0`` turns it off).

Costs: at the end of every run a table gives the seconds per notebook (nbval
with defaults beside the papermill smoke run), and ``build/test_seconds.json``
records the seconds per group of this run. Copy it over
``tests/test_seconds.json`` after a full CI run when the figures drift.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
RECORDED_SECONDS = ROOT / "tests" / "test_seconds.json"
_SMOKE = re.compile(r"test_notebook_runs_with_smoke_parameters\[([^\]]+)\]")

_seconds: dict[str, float] = defaultdict(float)


def group_of(nodeid: str) -> str:
    """The scheduling group of a test id: ``smoke:<stem>`` for a smoke run, else its file.

    xdist appends ``@<group>`` to the ids of grouped tests; that suffix is ignored.
    """
    nodeid = nodeid.split("@", 1)[0]
    m = _SMOKE.search(nodeid)
    return f"smoke:{m.group(1)}" if m else nodeid.split("::", 1)[0]


def recorded_seconds() -> dict[str, float]:
    """Seconds per group from the last recorded run (empty if the file is missing or unreadable)."""
    try:
        table = json.loads(RECORDED_SECONDS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in table.items() if isinstance(v, (int, float))}


def pytest_configure(config):
    # Verdicts of the checks that tests (and the notebooks they execute) make stay
    # out of the learner's progress ledger, build/progress.jsonl.
    ledger = Path(tempfile.gettempdir()) / f"course-test-progress-{os.getpid()}.jsonl"
    os.environ["COURSE_PROGRESS_LEDGER"] = str(ledger)
    # No progress bars in the kernels nbval and papermill start, or in the log (helpers.bars).
    os.environ["COURSE_PROGRESS_BARS"] = "0"
    # Kernels fork from a process that has imported torch once (tests/kernel_zygote.py).
    from tests.kernel_zygote import install

    install()


def shard_unit(group: str) -> str:
    """What a scheduling group belongs to when the suite is sharded: its notebook's stem, or its test file.

    A notebook's nbval run and its smoke run are one unit, so each notebook is
    tested on exactly one shard; every other test file is a unit of its own.
    """
    if group.startswith("smoke:"):
        return group.removeprefix("smoke:")
    if group.startswith("notebooks/") and group.endswith(".ipynb"):
        return Path(group).stem
    return group


def parse_shard(value: str) -> tuple[int, int]:
    """``"k/N"`` -> (k, N) with 1 <= k <= N; raises ValueError with the expected form otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", value or "")
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"SHARD must be k/N with 1 <= k <= N, e.g. SHARD=2/3; got {value!r}")
    return int(m[1]), int(m[2])


def shard_plan(units: list[str], n: int, cost: dict[str, float]) -> dict[str, int]:
    """Assign each unit to one of ``n`` shards (numbered from 1), balancing their recorded seconds.

    Longest processing time first: units in order of falling cost (ties by
    name), each to the shard with the least load so far (ties: the lowest
    number). Deterministic: the same units and costs give the same plan on
    every machine. A unit with no recorded cost counts as the median of the
    recorded ones.
    """
    known = sorted(cost[u] for u in units if u in cost)
    default = known[len(known) // 2] if known else 1.0
    loads = [0.0] * n
    plan = {}
    for unit in sorted(units, key=lambda u: (-cost.get(u, default), u)):
        k = min(range(n), key=lambda i: (loads[i], i))
        plan[unit] = k + 1
        loads[k] += cost.get(unit, default)
    return plan


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="K/N",
                     help="run the K-th of N balanced shares of the suite (each notebook on one shard; "
                          "each test file on one): make test SHARD=K/N")


def _select_shard(config, items) -> None:
    try:
        k, n = parse_shard(config.getoption("--shard"))
    except ValueError as err:
        import pytest

        raise pytest.UsageError(str(err)) from None
    recorded = recorded_seconds()
    cost: dict[str, float] = defaultdict(float)
    for group, seconds in recorded.items():
        cost[shard_unit(group)] += seconds
    units = sorted({shard_unit(group_of(item.nodeid)) for item in items})
    plan = shard_plan(units, n, {u: cost[u] for u in units if u in cost})
    keep, dropped = [], []
    for item in items:
        (keep if plan[shard_unit(group_of(item.nodeid))] == k else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def pytest_collection_modifyitems(config, items):
    if config is not None and config.getoption("--shard", None):
        _select_shard(config, items)
    cost = recorded_seconds()
    # A stable sort: tests keep their order inside a group (nbval cells must).
    items.sort(key=lambda item: -cost.get(group_of(item.nodeid), 0.0))


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """``loadfile``, except that each smoke run is a work unit of its own."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_runtest_logreport(report):
    _seconds[group_of(report.nodeid)] += report.duration


def _write_seconds(config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes
        return
    from helpers.paths import atomic_write_text, build_dir

    table = {k: round(v, 1) for k, v in sorted(_seconds.items())}
    atomic_write_text(build_dir() / "test_seconds.json", json.dumps(table, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter, config):
    if not _seconds:
        return
    _write_seconds(config)
    nbval = {Path(g).stem: s for g, s in _seconds.items() if g.endswith(".ipynb")}
    smoke = {g.removeprefix("smoke:"): s for g, s in _seconds.items() if g.startswith("smoke:")}
    stems = sorted(set(nbval) | set(smoke))
    if not stems:
        return
    tr = terminalreporter
    tr.section("seconds per notebook")
    w = max(len("notebook"), *(len(stem) for stem in stems))
    tr.write_line(f"{'notebook':{w}s} {'nbval (defaults)':>17s} {'papermill (smoke)':>18s}")
    for stem in stems:
        a = f"{nbval[stem]:.1f}" if stem in nbval else "-"
        b = f"{smoke[stem]:.1f}" if stem in smoke else "-"
        tr.write_line(f"{stem:{w}s} {a:>17s} {b:>18s}")
    tr.write_line(f"{'total':{w}s} {sum(nbval.values()):>17.1f} {sum(smoke.values()):>18.1f}")
    rest = sum(s for g, s in _seconds.items() if not g.endswith(".ipynb") and not g.startswith("smoke:"))
    tr.write_line(f"other tests: {rest:.1f} s; per-group seconds in build/test_seconds.json")
