"""Execute every notebook with papermill and its smoke parameters.

Fails on any error, on code cells that never ran, and on a notebook that did
not reach ``report.finish()``: a skipped notebook must not pass as a run.
"""

from __future__ import annotations

import pytest

from helpers.runner import chapters, run_chapter

from .conftest import shared_mirror


@pytest.mark.slow
@pytest.mark.parametrize("stem", list(chapters()))
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
