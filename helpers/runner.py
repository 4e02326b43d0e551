"""``make run``: execute every chapter with papermill and write the course report.

Each notebook in ``notebooks/chapters.yaml`` order is executed into
``build/executed/``; then ``build/report.md`` and ``build/report.json`` get a
row per chapter with its status, wall seconds and the headline figures the
notebook recorded through :class:`helpers.report.ChapterReport`.

A chapter is OK only if papermill raised nothing, every non-empty code cell
really executed, and the notebook reached ``report.finish()``. A failure
names the cell (its execution count) and the error.

Usage::

    python -m helpers.runner                 # every chapter, default parameters
    python -m helpers.runner 05 07           # chapters whose stem starts with these
    python -m helpers.runner --smoke         # the tiny smoke parameters from chapters.yaml
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
import yaml

from .authoring import KERNEL_NAME
from .bars import off_in_children
from .paths import NOTEBOOKS, atomic_write_text, build_dir, rel
from .report import figures_path, format_figure, read_figures

CHAPTERS_FILE = NOTEBOOKS / "chapters.yaml"

#: Seconds between papermill's saves of the executed notebook while it runs (it is always saved at the end).
#: papermill writes the whole notebook at the start and at the end of every cell: for chapter 01 (153 cells,
#: a 0.4 MB notebook) that took its run from 8 s to 15-17 s on 2 cores. A save every few seconds still lets
#: a learner watch a long run, or read a killed one, in ``build/executed/``.
SAVE_EVERY_S = 10.0
ENGINE_NAME = "course"


def chapters() -> dict[str, dict]:
    """The chapter table (``notebooks/chapters.yaml``), in course order.

    Raises:
        ValueError: an entry lacks ``title`` or has a malformed ``smoke`` table.
    """
    table = yaml.safe_load(CHAPTERS_FILE.read_text(encoding="utf-8")) or {}
    for stem, meta in table.items():
        if not isinstance(meta, dict) or "title" not in meta:
            raise ValueError(f"{rel(CHAPTERS_FILE)}: entry {stem!r} needs a title")
        if not isinstance(meta.setdefault("smoke", {}) or {}, dict):
            raise ValueError(f"{rel(CHAPTERS_FILE)}: smoke of {stem!r} must be a mapping")
        meta["smoke"] = meta["smoke"] or {}
    return table


def unexecuted_cells(nb_path: Path) -> list[int]:
    """Indices of non-empty code cells that have no execution count (did not run)."""
    nb = nbformat.read(nb_path, as_version=4)
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and c.source.strip() and c.get("execution_count") is None
    ]


@dataclass
class ChapterResult:
    chapter: str
    title: str
    status: str  # "OK" or "FAILED"
    seconds: float
    figures: dict = field(default_factory=dict)
    error: str = ""


def run_chapter(stem: str, *, smoke: bool = False, out_dir: Path | None = None, timeout: int = 1800) -> ChapterResult:
    """Execute ``notebooks/<stem>.ipynb`` with papermill and judge the run.

    Args:
        stem: e.g. ``"05_mlp_mnist"``.
        smoke: pass the chapter's smoke parameters instead of the defaults.
        out_dir: where the executed notebook goes (default ``build/executed``).
        timeout: seconds allowed per cell.

    Returns:
        A :class:`ChapterResult`; ``status`` is ``"OK"`` only if the notebook
        ran every code cell without error and reached ``report.finish()``.
    """
    meta = chapters()[stem]
    return run_notebook(
        NOTEBOOKS / f"{stem}.ipynb",
        title=meta["title"],
        parameters=meta["smoke"] if smoke else {},
        out_dir=out_dir or build_dir() / "executed",
        timeout=timeout,
    )


@functools.cache
def _register_engine() -> None:
    """Register papermill's nbclient engine under :data:`ENGINE_NAME`, with saves at most every :data:`SAVE_EVERY_S`.

    papermill (2.x) builds its ``NotebookExecutionManager`` inside ``Engine.execute_notebook``; this
    engine builds a subclass whose ``save()`` skips a save that comes sooner than ``SAVE_EVERY_S``
    after the last one, except the final save of ``notebook_complete()``, which papermill also reaches
    when a cell raised. Cached: the classes are built and registered once per process.
    """
    from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

    class ThrottledManager(NotebookExecutionManager):
        finishing = False

        def save(self, **kwargs):
            if self.finishing or (self.now() - self.last_save_time).total_seconds() >= SAVE_EVERY_S:
                super().save(**kwargs)

        def notebook_complete(self, **kwargs):
            self.finishing = True
            super().notebook_complete(**kwargs)

    class ThrottledEngine(NBClientEngine):
        @classmethod
        def execute_notebook(cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False,
                             autosave_cell_every=30, **kwargs):
            nb_man = ThrottledManager(nb, output_path=output_path, progress_bar=progress_bar,
                                      log_output=log_output, autosave_cell_every=autosave_cell_every)
            nb_man.notebook_start()
            try:
                cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
            finally:
                nb_man.cleanup_pbar()
                nb_man.notebook_complete()
            return nb_man.nb

    papermill_engines.register(ENGINE_NAME, ThrottledEngine)


def run_notebook(notebook: Path, *, title: str, parameters: dict, out_dir: Path, timeout: int = 1800) -> ChapterResult:
    """Execute one notebook (cwd ``notebooks/``) into ``out_dir`` and judge the run; see :func:`run_chapter`.

    The notebook's stem is the chapter name its ``ChapterReport`` must use.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    _register_engine()
    stem = notebook.stem
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{stem}.ipynb"
    figures_path(stem).unlink(missing_ok=True)  # a stale record must not pass for this run
    error = ""
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(notebook),
            str(output),
            parameters=parameters,
            kernel_name=KERNEL_NAME,
            engine_name=ENGINE_NAME,
            # SIGKILL to the kernel's process group once the last cell is done, as nbval does: a graceful
            # shutdown of a kernel with torch loaded took 1.7-3.2 s per run here, and it has nothing to save
            shutdown_kernel="immediate",
            cwd=str(NOTEBOOKS),
            progress_bar=False,
            log_output=False,
            execution_timeout=timeout,
            # keeps the kernel's start-up notice off the progress lines
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
    except PapermillExecutionError as exc:
        first_line = next((ln for ln in (exc.source or "").splitlines() if ln.strip()), "")
        error = f"cell [{exc.exec_count}] raised {exc.ename}: {exc.evalue} (cell starts: {first_line[:60]!r})"
    except Exception as exc:  # kernel died, timeout, missing kernel ...
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start

    record = read_figures(stem) or {}
    if not error:
        skipped = unexecuted_cells(output)
        if skipped:
            error = f"{len(skipped)} code cells did not run (first: cell {skipped[0] + 1} of the notebook; did one stop the kernel, e.g. with exit()?)"
        elif not record.get("complete"):
            error = "the notebook never reached report.finish() (did it really run?)"
    return ChapterResult(
        chapter=stem,
        title=title,
        status="FAILED" if error else "OK",
        seconds=round(seconds, 1),
        figures=record.get("figures", {}),
        error=error,
    )


def _format_figures(figures: dict) -> str:
    return "; ".join(f"{name} {format_figure(f['value'], f['unit'])}" for name, f in figures.items())


def write_report(results: list[ChapterResult], folder: Path, *, smoke: bool = False, planned: int | None = None) -> Path:
    """Write ``report.md`` and ``report.json`` into ``folder`` atomically; return the .md path.

    ``planned`` is how many chapters the run will execute; while fewer
    results are in, the report says the run is still in progress (or was
    interrupted).
    """
    folder.mkdir(parents=True, exist_ok=True)
    total = sum(r.seconds for r in results)
    ok = sum(r.status == "OK" for r in results)
    lines = [
        "# Course report",
        "",
        f"{ok} of {len(results)} chapters OK, {total:.0f} s in all"
        + (" (smoke parameters)" if smoke else " (default parameters)") + "."
        + (f" **{planned - len(results)} more still to run (or the run was interrupted).**" if planned and planned > len(results) else ""),
        "",
        "| chapter | title | status | seconds | headline figures |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for r in results:
        figs = _format_figures(r.figures).replace("|", "\\|") or "-"  # "|" would split the table cell
        error = " ".join(r.error.split()).replace("|", "\\|")  # one table row, whatever the message
        status = r.status if r.status == "OK" else f"**FAILED**: {error}"
        lines.append(f"| {r.chapter} | {r.title} | {status} | {r.seconds:.1f} | {figs} |")
    payload = {
        "smoke": smoke,
        "planned": planned or len(results),
        "total_seconds": round(total, 1),
        "chapters": [asdict(r) for r in results],
    }
    atomic_write_text(folder / "report.md", "\n".join(lines) + "\n")
    atomic_write_text(folder / "report.json", json.dumps(payload, indent=2))
    return folder / "report.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.runner", description="Run every chapter and write build/report.md.")
    parser.add_argument("names", nargs="*", help="chapter stems or prefixes (default: all)")
    parser.add_argument("--smoke", action="store_true", help="use the smoke parameters from chapters.yaml")
    args = parser.parse_args(argv)
    off_in_children()  # the executed notebooks and the log hold no progress bars (helpers.bars)

    table = chapters()
    chosen = [s for s in table if not args.names or any(s.startswith(n) for n in args.names)]
    if not chosen:
        print(f"no chapter matches {args.names}; chapters: {', '.join(table)}", file=sys.stderr)
        return 2
    results = []
    for i, stem in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {stem} ...", end=" ", flush=True)
        result = run_chapter(stem, smoke=args.smoke)
        results.append(result)
        print(f"{result.status} in {result.seconds:.1f} s", (f"- {result.error}" if result.error else f"- {_format_figures(result.figures)}"), flush=True)
        write_report(results, build_dir(), smoke=args.smoke, planned=len(chosen))
    report = write_report(results, build_dir(), smoke=args.smoke, planned=len(chosen))
    failed = [r for r in results if r.status != "OK"]
    print(f"report: {rel(report)} ({len(results) - len(failed)}/{len(results)} OK)")
    for r in failed:
        print(f"FAILED {r.chapter}: {r.error} (executed copy: {rel(build_dir() / 'executed' / (r.chapter + '.ipynb'))})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
