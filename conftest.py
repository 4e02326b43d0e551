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


def pytest_collection_modifyitems(config, items):
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
