"""Root pytest plugin: a per-notebook timing table at the end of every run.

nbval reports one test item per cell; this adds them up per notebook, beside
the papermill smoke run of the same notebook, so CI always shows what each
chapter costs.
"""

from __future__ import annotations

import re
from collections import defaultdict

_nbval: dict[str, float] = defaultdict(float)
_smoke: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _nbval[path.rsplit("/", 1)[-1].removesuffix(".ipynb")] += report.duration
    else:
        m = re.search(r"test_notebook_runs_with_smoke_parameters\[(.+)\]", report.nodeid)
        if m:
            _smoke[m.group(1)] += report.duration


def pytest_terminal_summary(terminalreporter):
    stems = sorted(set(_nbval) | set(_smoke))
    if not stems:
        return
    tr = terminalreporter
    tr.section("seconds per notebook")
    w = max(len("notebook"), *(len(stem) for stem in stems))
    tr.write_line(f"{'notebook':{w}s} {'nbval (defaults)':>17s} {'papermill (smoke)':>18s}")
    for stem in stems:
        nbval = f"{_nbval[stem]:.1f}" if stem in _nbval else "-"
        smoke = f"{_smoke[stem]:.1f}" if stem in _smoke else "-"
        tr.write_line(f"{stem:{w}s} {nbval:>17s} {smoke:>18s}")
    tr.write_line(f"{'total':{w}s} {sum(_nbval.values()):>17.1f} {sum(_smoke.values()):>18.1f}")
