"""The progress ledger: every exercise verdict, kept locally, and ``make progress``.

Each :func:`helpers.exercises.check` appends one JSON line to
``build/progress.jsonl`` (or ``$COURSE_PROGRESS_LEDGER``)::

    {"exercise": "05.top_confusions", "status": "failed", "time": "2026-12-01T10:02:03+00:00"}

It holds the exercise id, the verdict and the time, never the learner's code.
One line is written with one ``write`` on a file opened for appending, so
several kernels can share the ledger, and it survives restarts.

Reading is forgiving: a corrupt or half-written line (a kernel killed mid-write)
is skipped with a warning that names its line number, and every other line
still counts. Recording never raises: a ledger that cannot be written (a
read-only folder, a full disk) costs a warning, never a failed notebook.

Command::

    python -m helpers.exercises     # what `make progress` runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from ..paths import build_dir, rel

#: Verdicts as :class:`helpers.exercises.ExerciseResult` names them.
STATUSES = ("passed", "failed", "not attempted")


class LedgerWarning(UserWarning):
    """The ledger could not be written, or a line of it could not be read."""


def ledger_path() -> Path:
    """``$COURSE_PROGRESS_LEDGER`` if set, else ``build/progress.jsonl``."""
    value = os.environ.get("COURSE_PROGRESS_LEDGER", "").strip()
    return Path(value).expanduser() if value else build_dir() / "progress.jsonl"


def record(exercise: str, status: str, *, path: Path | None = None) -> None:
    """Append one verdict to the ledger. Never raises (a failure is a :class:`LedgerWarning`)."""
    path = path or ledger_path()
    line = json.dumps(
        {"exercise": exercise, "status": status, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # After a half-written line, start on a new one so this record stays whole.
            size = os.fstat(fd).st_size
            prefix = ""
            if size:
                with open(path, "rb") as fh:
                    fh.seek(size - 1)
                    prefix = "" if fh.read(1) == b"\n" else "\n"
            os.write(fd, (prefix + line + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    except Exception as exc:  # noqa: BLE001 - the ledger must never break a notebook
        warnings.warn(f"could not record progress in {rel(path)}: {exc}", LedgerWarning, stacklevel=2)


def read(path: Path | None = None) -> list[dict]:
    """Every readable verdict in the ledger, oldest first ([] when there is no ledger).

    A line that is not a JSON object with a known ``exercise`` and ``status``
    is skipped with a :class:`LedgerWarning` naming its line number.
    """
    path = path or ledger_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line.decode("utf-8"))
            if not (isinstance(entry, dict) and isinstance(entry.get("exercise"), str) and entry.get("status") in STATUSES):
                raise ValueError("not a verdict")
        except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            warnings.warn(f"{rel(path)} line {number} is corrupt and was skipped", LedgerWarning, stacklevel=2)
            continue
        entries.append(entry)
    return entries


def summary(entries: Iterable[dict], exercises: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per chapter (``"05"``): how many exercises exist, were attempted, passed, are not yet tried.

    An exercise counts as *attempted* once it got a passed or failed verdict
    (a stub checked as "not attempted" does not count), and as *passed* once it
    passed, even if a later attempt failed.
    """
    known = sorted(set(exercises))
    attempted = {e["exercise"] for e in entries if e["status"] in ("passed", "failed")}
    passed = {e["exercise"] for e in entries if e["status"] == "passed"}
    table: dict[str, dict[str, int]] = {}
    for name in known:
        row = table.setdefault(name.split(".", 1)[0], {"exercises": 0, "attempted": 0, "passed": 0, "not yet tried": 0})
        row["exercises"] += 1
        row["attempted"] += name in attempted
        row["passed"] += name in passed
        row["not yet tried"] += name not in attempted
    return table


def format_table(table: dict[str, dict[str, int]], titles: dict[str, str]) -> str:
    cols = ("exercises", "attempted", "passed", "not yet tried")
    lines = ["| chapter | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols)]
    for chapter, row in table.items():
        lines.append(f"| {chapter} {titles.get(chapter, '')} | " + " | ".join(str(row[c]) for c in cols) + " |")
    total = {c: sum(row[c] for row in table.values()) for c in cols}
    lines.append("| **all** | " + " | ".join(str(total[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Your exercise progress, per chapter.")
    parser.add_argument("--ledger", type=Path, help="ledger file (default: build/progress.jsonl)")
    args = parser.parse_args(argv)
    from ..runner import chapters
    from . import EXERCISES, _load_all

    _load_all()
    path = args.ledger or ledger_path()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LedgerWarning)
        entries = read(path)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    titles = {stem[:2]: meta["title"] for stem, meta in chapters().items()}
    print(f"progress from {rel(path)} ({len(entries)} verdicts)")
    print(format_table(summary(entries, EXERCISES), titles))
    return 0

