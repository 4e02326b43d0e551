"""The notebooks as files: pairs in sync, anatomy present, smoke parameters valid, hygiene."""

from __future__ import annotations

import ast
import subprocess
import sys

import jupytext
import pytest

from helpers.authoring import out_of_sync, sources
from helpers.paths import NOTEBOOKS
from helpers.runner import chapters

from .conftest import SHARED_MIRROR

SOURCES = sources()


def test_every_chapter_has_a_source_and_vice_versa():
    assert [p.stem for p in SOURCES] == list(chapters())


def test_the_notebooks_folder_shows_one_entry_per_chapter():
    """What JupyterLab's file browser lists in notebooks/: the chapters, their table and the src/ folder of sources."""
    shown = {p.name for p in NOTEBOOKS.iterdir() if not p.name.startswith(".") and p.name != "__pycache__"}
    expected = {f"{stem}.ipynb" for stem in chapters()} | {"chapters.yaml", "src"}
    assert shown == expected, (
        f"notebooks/ should hold one .ipynb per chapter, chapters.yaml and src/; "
        f"extra: {sorted(shown - expected)}, missing: {sorted(expected - shown)}"
    )


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_pair_in_sync(py):
    problem = out_of_sync(py)
    assert problem is None, f"{problem}; run `make notebooks NB={py.stem[:2]}`"


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_anatomy(py):
    nb = jupytext.read(py, fmt="py:percent")
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.lstrip().startswith("# "), "starts with a title"
    header = first.source.lower()
    for part in ("what you will learn", "prerequisites", "estimated time"):
        assert part in header, f"the header lacks '{part}'"
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    assert "summary" in "\n".join(c.source.lower() for c in nb.cells[-3:] if c.cell_type == "markdown")
    assert nb.cells[-1].cell_type == "code" and "report.finish()" in nb.cells[-1].source
    targets = [t for node in ast.walk(ast.parse(params[0].source)) if isinstance(node, ast.Assign) for t in node.targets]
    assert all(isinstance(t, ast.Name) for t in targets), (
        "write one `NAME = value` per line in the parameters cell: papermill and readers look for simple assignments"
    )
    names = {t.id for t in targets}
    unknown = set(chapters()[py.stem]["smoke"]) - names
    assert not unknown, f"smoke parameters {unknown} are not defined in the parameters cell"


@pytest.mark.skipif(not (SHARED_MIRROR.parent / "tools" / "check_notebooks.py").is_file(), reason="shared tools not beside the checkout")
def test_hygiene_check_passes():
    tool = SHARED_MIRROR.parent / "tools" / "check_notebooks.py"
    out = subprocess.run([sys.executable, str(tool), str(NOTEBOOKS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_build_merges_the_pieces_of_a_cells_printed_text():
    """The kernel flushes stdout every 0.2 s, so one printed line can arrive in two pieces; build stores one block."""
    from helpers.authoring import _coalesce_streams

    pieces = [
        {"output_type": "stream", "name": "stdout", "text": "num_batches_tracked:"},
        {"output_type": "stream", "name": "stdout", "text": " 3\n"},
        {"output_type": "stream", "name": "stderr", "text": "a warning\n"},
        {"output_type": "display_data", "data": {"text/plain": "<Figure>"}, "metadata": {}},
        {"output_type": "stream", "name": "stdout", "text": "after\n"},
    ]
    merged = _coalesce_streams(pieces)
    assert [o.get("name", o["output_type"]) for o in merged] == ["stdout", "stderr", "display_data", "stdout"]
    assert merged[0]["text"] == "num_batches_tracked: 3\n", merged[0]
