"""Notebook sources: each chapter is a jupytext percent-format ``.py`` file in
``notebooks/src/`` (the one source of truth, reviewable as plain Python) paired
with the ``notebooks/NN_topic.ipynb`` that learners open, which carries outputs
from a real run.

Commands (``make notebooks`` runs ``build``)::

    python -m helpers.authoring build [05_mlp_mnist ...]   # .py -> executed .ipynb
    python -m helpers.authoring check                       # are all pairs in sync?
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

from .bars import off_in_children
from .paths import JUPYTEXT_FORMATS, NOTEBOOKS, SOURCES, chapter_notebook
from .report import read_figures

#: The Jupyter kernel that ``make setup`` registers inside .venv.
KERNEL_NAME = "pytorch-course"
KERNELSPEC = {"name": KERNEL_NAME, "display_name": "PyTorch course (.venv)", "language": "python"}


def sources() -> list[Path]:
    """Every chapter source ``notebooks/src/NN_topic.py``, sorted."""
    return sorted(SOURCES.glob("[0-9][0-9]_*.py"))


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [
        (c.cell_type, c.source.strip(), tuple(sorted(c.get("metadata", {}).get("tags", []))))
        for c in nb.cells
    ]


def out_of_sync(py: Path) -> str | None:
    """Why ``py`` and its ``.ipynb`` differ, or ``None`` when their cells match."""
    ipynb = chapter_notebook(py.stem)
    if not ipynb.exists():
        return f"{ipynb.name} is missing: run `make notebooks`"
    want = _cells(jupytext.read(py, fmt="py:percent"))
    stored = nbformat.read(ipynb, as_version=4)
    formats = stored.metadata.get("jupytext", {}).get("formats")
    if formats != JUPYTEXT_FORMATS:  # jupytext in JupyterLab would pair the notebook with another file
        return f"{ipynb.name} pairs with jupytext formats {formats!r}, not {JUPYTEXT_FORMATS!r}"
    have = _cells(stored)
    if len(want) != len(have):
        return f"{py.name} has {len(want)} cells but {ipynb.name} has {len(have)}"
    for i, (w, h) in enumerate(zip(want, have)):
        if w != h:
            return f"cell {i} differs between {py.name} and {ipynb.name} (first line: {w[1][:60]!r})"
    return None


def _coalesce_streams(outputs: list) -> list:
    """Merge consecutive stream outputs of the same name (stdout, stderr) into one.

    The kernel sends a cell's printed text in pieces, whenever its output thread
    flushes (every 0.2 s), so where one stored block ends depends on the load of
    the machine, even in the middle of a line. nbval merges them the same way
    before it compares outputs.
    """
    merged: list = []
    for out in outputs:
        last = merged[-1] if merged else None
        if (last is not None and out.get("output_type") == "stream" == last.get("output_type")
                and out.get("name") == last.get("name")):
            last["text"] = "".join(last["text"]) + "".join(out["text"])
        else:
            merged.append(out)
    return merged


def run_stamp(stem: str, seconds: float) -> dict:
    """What the stored outputs of chapter ``stem`` ran with, for the notebook's metadata (``course.run``).

    Returns ``{"torch": version, "device": ..., "date": "YYYY-MM-DD" (UTC), "seconds": wall seconds}``;
    the torch version and device are the ones the kernel's ``ChapterReport`` recorded
    (``build/figures/<stem>.json``). The course site prints this stamp on the chapter's page.

    Raises:
        RuntimeError: the run left no record with both (the notebook never created its ``ChapterReport``).
    """
    record = read_figures(stem) or {}
    if not record.get("torch") or not record.get("device"):
        raise RuntimeError(f"{stem}: build/figures/{stem}.json has no torch version and device; "
                           f"does the notebook create ChapterReport({stem!r})?")
    return {"torch": record["torch"], "device": record["device"],
            "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(), "seconds": round(seconds)}


def build(py: Path, timeout: int = 1200) -> float:
    """Execute ``py`` top to bottom in the course kernel and write the paired ``.ipynb``.

    Returns the wall seconds. Raises ``nbclient`` errors if a cell fails and
    ``RuntimeError`` if a cell wrote to stderr (nbval discards stderr, and the
    hygiene check refuses stored stderr).
    """
    off_in_children()  # stored outputs hold no progress bars (helpers.bars)
    nb = jupytext.read(py, fmt="py:percent")
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["jupytext"] = {"formats": JUPYTEXT_FORMATS}
    start = time.perf_counter()
    NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=timeout,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    ).execute()
    seconds = time.perf_counter() - start
    noisy = []
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)  # per-cell timestamps: noise in diffs
        if cell.cell_type == "code":
            cell.outputs = _coalesce_streams(cell.outputs)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                noisy.append(f"cell {i}: {out.get('text', '')[:200]!r}")
    if noisy:
        raise RuntimeError(f"{py.name} wrote to stderr; silence or capture it:\n" + "\n".join(noisy))
    nb.metadata.get("language_info", {}).pop("version", None)
    nb.metadata["course"] = {"run": run_stamp(py.stem, seconds)}
    nbformat.write(nb, chapter_notebook(py.stem))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.authoring")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="execute sources and write .ipynb with outputs")
    b.add_argument("names", nargs="*", help="notebook stems or prefixes (default: all)")
    sub.add_parser("check", help="exit 1 if any .py/.ipynb pair is out of sync")
    args = parser.parse_args(argv)

    if args.cmd == "check":
        problems = [p for p in (out_of_sync(py) for py in sources()) if p]
        print("\n".join(problems) or f"{len(sources())} notebook pairs in sync")
        return 1 if problems else 0
    chosen = [py for py in sources() if not args.names or any(py.stem.startswith(n) for n in args.names)]
    if not chosen:
        print(f"no notebook source matches {args.names}", file=sys.stderr)
        return 1
    for py in chosen:
        print(f"building {py.stem} ...", flush=True)
        print(f"  {build(py):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
