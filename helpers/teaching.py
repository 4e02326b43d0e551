"""The measured part of ``TEACHING.md``: each chapter's run time and what it needs, from a real run.

``make teaching`` (``python -m helpers.teaching``) reads ``build/report.json``,
which ``make run`` writes (every chapter executed with its default
parameters, one after another), and ``notebooks/chapters.yaml`` (datasets,
GPU cells, ``needs``), and rewrites the table between the two marker lines
of ``TEACHING.md``. Nothing in that table is typed by hand.

``--check`` only compares: exit status 1 if ``TEACHING.md`` lists other
chapters than ``chapters.yaml`` (the table is stale), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .paths import ROOT, atomic_write_text, build_dir, rel
from .runner import chapters

TEACHING = ROOT / "TEACHING.md"
START, END = "<!-- chapter-table:start -->", "<!-- chapter-table:end -->"

#: What a ``needs`` entry of ``chapters.yaml`` means for a teacher preparing machines.
NEEDS = {
    "compiler": "a C++ compiler (torch.compile's Inductor or a C++ extension build)",
    "processes": "several processes at once (DataLoader workers or torchrun ranks): 2+ cores help",
}


def chapter_table(report: dict, table: dict[str, dict]) -> str:
    """The markdown table: one row per chapter of ``table``, its seconds taken from ``report``.

    Args:
        report: the parsed ``build/report.json`` (keys ``chapters``, ``smoke``, ``total_seconds``).
        table: :func:`helpers.runner.chapters`.

    Raises:
        ValueError: the report was a smoke run (its times say nothing about a class),
            or a ``needs`` entry is not one of :data:`NEEDS`.
    """
    if report.get("smoke"):
        raise ValueError("build/report.json is from a smoke run (make run --smoke?): run `make run` for real times")
    seconds = {row["chapter"]: row for row in report.get("chapters", [])}
    lines = ["| chapter | title | run time, default parameters | datasets | needs |", "| --- | --- | ---: | --- | --- |"]
    for stem, meta in table.items():
        unknown = set(meta.get("needs", [])) - set(NEEDS)
        if unknown:
            raise ValueError(f"chapters.yaml: {stem} needs {sorted(unknown)}; known: {sorted(NEEDS)}")
        row = seconds.get(stem)
        time = "not run" if row is None else (f"{row['seconds']:.0f} s" + ("" if row["status"] == "OK" else " (FAILED)"))
        needs = list(meta.get("needs", []))
        if meta.get("accelerator") == "cuda":
            needs.append("GPU cells (skipped on CPU)")
        lines.append(f"| {stem[:2]} | {meta['title']} | {time} | {', '.join(meta.get('datasets') or []) or '-'} | "
                     f"{', '.join(needs) or '-'} |")
    total = sum(r["seconds"] for r in report.get("chapters", []))
    lines.append("")
    run = len(report.get("chapters", []))
    lines.append(f"All {run} chapters run, one after another: {total / 60:.0f} minutes on the machine that ran "
                 "`make run`. This is how long learners wait for the code, not how long a chapter takes to teach.")
    return "\n".join(lines)


def listed_chapters(text: str) -> list[str]:
    """The two-digit chapter numbers of the table in ``text`` (between the markers)."""
    block = text.split(START, 1)[-1].split(END, 1)[0]
    return re.findall(r"^\| (\d\d) \|", block, flags=re.M)


def update(path: Path = TEACHING, report_path: Path | None = None) -> str:
    """Rewrite the table of ``path`` (atomically) from ``report_path`` (default ``build/report.json``); return it.

    Raises:
        FileNotFoundError: no report (run ``make run`` first) or no ``path``.
        ValueError: ``path`` lacks the marker lines, or see :func:`chapter_table`.
    """
    report_path = report_path or build_dir() / "report.json"
    if not report_path.is_file():
        raise FileNotFoundError(f"no {rel(report_path)}: run `make run` first (it executes every chapter and writes it)")
    text = path.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"{rel(path)} needs the lines {START} and {END} around the chapter table")
    table = chapter_table(json.loads(report_path.read_text(encoding="utf-8")), chapters())
    head, rest = text.split(START, 1)
    new = f"{head}{START}\n{table}\n{END}{rest.split(END, 1)[1]}"
    atomic_write_text(path, new)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.teaching", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that TEACHING.md lists every chapter")
    parser.add_argument("--report", type=Path, default=None, help="report.json to read (default: build/report.json)")
    args = parser.parse_args(argv)
    if args.check:
        want = [stem[:2] for stem in chapters()]
        got = listed_chapters(TEACHING.read_text(encoding="utf-8"))
        if got != want:
            print(f"TEACHING.md lists chapters {got}, chapters.yaml has {want}: run `make run`, then `make teaching`",
                  file=sys.stderr)
            return 1
        return 0
    try:
        update(report_path=args.report)
    except (FileNotFoundError, ValueError) as err:
        print(err, file=sys.stderr)
        return 1
    print(f"updated the chapter table of {rel(TEACHING)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
