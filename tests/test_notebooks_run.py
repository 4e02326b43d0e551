"""Execute every notebook with papermill and its smoke parameters.

Fails on any error, on code cells that never ran, and on a notebook that did
not reach ``report.finish()``: a skipped notebook must not pass as a run.
"""

from __future__ import annotations

import pytest

from helpers.runner import chapters, run_chapter

from .conftest import shared_mirror

#: Chapters whose smoke run is a test of its own, which also checks what the run printed.
OWN_SMOKE_TEST = {"06_data_loading": "tests/test_ch06_spawn.py"}


@pytest.mark.slow
@pytest.mark.parametrize("stem", [stem for stem in chapters() if stem not in OWN_SMOKE_TEST])
def test_notebook_runs_with_smoke_parameters(stem, tmp_path, monkeypatch):
    meta = chapters()[stem]
    if meta["datasets"] and shared_mirror() is None:
        from helpers.data import status

        if any(status(d) not in ("ready",) for d in meta["datasets"]):
            pytest.skip(f"{stem} needs {meta['datasets']} and no data or mirror is available")
    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "build"))
    if shared_mirror() is not None:
        monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    result = run_chapter(stem, smoke=True, out_dir=tmp_path)
    assert result.status == "OK", result.error
    assert result.figures, f"{stem} recorded no headline figure"


def test_every_chapter_has_a_smoke_run():
    from pathlib import Path

    for stem, test_file in OWN_SMOKE_TEST.items():
        assert stem in chapters(), f"OWN_SMOKE_TEST names {stem}, which notebooks/chapters.yaml lacks"
        source = (Path(__file__).parents[1] / test_file).read_text(encoding="utf-8")
        assert f'"{stem}"' in source and 'chapters()[STEM]["smoke"]' in source, f"{test_file} must run {stem} with its smoke parameters"


def _notebook(path, *cells):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "pytorch-course", "language": "python", "display_name": "course"}
    nb.cells = [nbformat.v4.new_code_cell("N = 1", metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "cells, expected",
    [
        (("from helpers.report import ChapterReport", "r = ChapterReport('98_probe')", "r.record('n', N)", "r.finish()"), None),
        (("from helpers.report import ChapterReport", "r = ChapterReport('98_probe')", "raise ValueError('boom')", "r.finish()"), "cell [5] raised ValueError: boom (cell starts: \"raise ValueError('boom')\")"),
        (("from helpers.report import ChapterReport", "r = ChapterReport('98_probe')", "r.record('n', N)"), "never reached report.finish()"),
    ],
    ids=["ok", "error-names-the-cell", "did-not-finish"],  # [5]: 2 parameter cells, then 3 more
)
def test_runner_judges_a_run(tmp_path, monkeypatch, cells, expected):
    from helpers.runner import run_notebook

    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "build"))
    result = run_notebook(_notebook(tmp_path / "98_probe.ipynb", *cells), title="probe", parameters={"N": 7}, out_dir=tmp_path / "out")
    if expected is None:
        assert result.status == "OK", result.error
        assert result.figures == {"n": {"value": 7, "unit": ""}}, "the injected parameter must reach the notebook"
    else:
        assert result.status == "FAILED" and expected in result.error


@pytest.mark.slow
def test_runner_saves_the_executed_notebook_at_most_every_few_seconds(tmp_path, monkeypatch):
    """papermill saves the whole notebook at every cell's start and end; the runner's engine throttles that,
    and still writes the finished notebook (with the error) when a cell raises."""
    import nbformat
    import papermill.engines

    from helpers import runner

    writes = []
    real_write = papermill.engines.write_ipynb
    monkeypatch.setattr(papermill.engines, "write_ipynb", lambda nb, path: (writes.append(path), real_write(nb, path)))
    monkeypatch.setattr(runner, "SAVE_EVERY_S", 3600.0)
    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "build"))
    cells = ["from helpers.report import ChapterReport", "r = ChapterReport('98_probe')", *["x = 1"] * 6, "r.finish()"]
    result = runner.run_notebook(_notebook(tmp_path / "98_probe.ipynb", *cells), title="probe", parameters={},
                                 out_dir=tmp_path / "out")
    assert result.status == "OK", result.error
    # papermill itself would save 2 x 10 times (cell start and end) plus at the start and the end
    assert 1 <= len(writes) <= 3, f"expected the start and final saves only, got {len(writes)}"
    ran = nbformat.read(tmp_path / "out" / "98_probe.ipynb", as_version=4)
    assert all(c.execution_count for c in ran.cells), "the final save must hold every executed cell"

    writes.clear()
    result = runner.run_notebook(_notebook(tmp_path / "98_fail.ipynb", "x = 1", "raise ValueError('late')", "y = 2"),
                                 title="probe", parameters={}, out_dir=tmp_path / "out")
    assert result.status == "FAILED" and "late" in result.error
    failed = nbformat.read(tmp_path / "out" / "98_fail.ipynb", as_version=4)
    assert any(o.get("ename") == "ValueError" for c in failed.cells for o in c.get("outputs", [])), \
        "the notebook written after a failing cell must show the error"
