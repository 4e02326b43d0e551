"""Chapter 06 with the ``spawn`` start method, as on macOS and Windows: the checked cells print what is stored.

The stored notebook is built on Linux, where DataLoader workers start with
``fork`` and inherit everything the notebook defined. Under ``spawn`` a worker
is a fresh Python that must import whatever it runs, and it cannot print into
the notebook. This test runs the chapter with ``START_METHOD="spawn"`` (the
setup cell applies it with ``torch.multiprocessing.set_start_method``) and
requires every ``# NBVAL_CHECK_OUTPUT`` cell to print exactly what the stored
notebook shows, so the chapter says the same thing on every platform.
It is also the chapter's smoke run: its parameters are chapter 06's ``smoke``
entry in ``notebooks/chapters.yaml``, and tests/test_notebooks_run.py leaves
the chapter out.
"""

from __future__ import annotations

import ast

import nbformat
import pytest

from helpers.paths import NOTEBOOKS
from helpers.runner import chapters, run_notebook

from .conftest import shared_mirror

STEM = "06_data_loading"
MARK = "# NBVAL_CHECK_OUTPUT"


def _text(cell) -> str:
    """What a cell printed or returned as text (stdout and text/plain results, in order)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def _checked(nb) -> list[tuple[str, str]]:
    return [(c.source, _text(c)) for c in nb.cells if c.cell_type == "code" and c.source.startswith(MARK)]


@pytest.mark.slow
def test_chapter_06_prints_the_stored_checked_output_under_spawn(tmp_path, monkeypatch):
    assert STEM in chapters(), "chapter 06 is missing from notebooks/chapters.yaml"
    # This test is the chapter's smoke run (tests/test_notebooks_run.py leaves it out). Parameters that change a
    # checked cell keep their defaults (STREAM_SAMPLES, IMBALANCE_*); the timed table, which no checked cell
    # depends on, shrinks to its num_workers=0 row (one spawn start-up costs seconds).
    spawn_parameters = chapters()[STEM]["smoke"]
    assert spawn_parameters.get("START_METHOD") == "spawn", "chapters.yaml: chapter 06's smoke parameters must set START_METHOD: spawn"
    if shared_mirror() is None:
        from helpers.data import status

        if status("mnist") != "ready":
            pytest.skip("chapter 06 needs MNIST and no data or mirror is available")
    else:
        monkeypatch.setenv("COURSE_DATA_MIRROR", str(shared_mirror()))
    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "build"))
    stored_nb = nbformat.read(NOTEBOOKS / f"{STEM}.ipynb", as_version=4)
    params = next(c for c in stored_nb.cells if "parameters" in c.metadata.get("tags", []))
    defined = {t.id for node in ast.parse(params.source).body if isinstance(node, ast.Assign) for t in node.targets}
    assert set(spawn_parameters) <= defined, f"not in the chapter's parameters cell: {set(spawn_parameters) - defined}"

    result = run_notebook(NOTEBOOKS / f"{STEM}.ipynb", title="Data loading (spawn)", parameters=spawn_parameters,
                          out_dir=tmp_path / "out", timeout=300)
    assert result.status == "OK", result.error
    assert result.figures, f"{STEM} recorded no headline figure"

    ran = nbformat.read(tmp_path / "out" / f"{STEM}.ipynb", as_version=4)
    setup = next(_text(c) for c in ran.cells if c.cell_type == "code" and "set_start_method" in c.source)
    assert "start with 'spawn'" in setup, f"the kernel did not switch to spawn: {setup!r}"

    stored = _checked(stored_nb)
    executed = _checked(ran)
    assert len(stored) >= 10, f"expected the chapter's checked cells, found {len(stored)}"
    assert [s for s, _ in executed] == [s for s, _ in stored], "the executed notebook's checked cells differ from the stored ones"
    for (source, want), (_, got) in zip(stored, executed):
        first = source.splitlines()[1] if "\n" in source else source
        assert got == want, f"under spawn the cell starting {first!r} printed\n{got}\ninstead of the stored\n{want}"


# --------------------------------------------------------------------------
# helpers.loading on its own (fast: no notebook)
# --------------------------------------------------------------------------


def test_shard_functions():
    from helpers.loading import naive_shard, strided_shard

    assert [list(naive_shard(11, w, 2)) for w in range(2)] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert sorted(i for w in range(3) for i in strided_shard(10, w, 3)) == list(range(10))


def test_image_stream_in_the_main_process_yields_everything_as_worker_minus_one():
    import torch

    from helpers.loading import ImageStream, strided_shard

    items = list(ImageStream(torch.zeros(5, 1, 2, 2), torch.arange(5), strided_shard))
    assert [(i, w) for i, w, _, _ in items] == [(i, -1) for i in range(5)]


def test_precomputed_shards_pickle_without_the_function_and_check_their_use():
    import pickle

    from helpers.loading import PrecomputedShards

    shards = PrecomputedShards(lambda n, w, k: range(w, n, k), 7, 2)  # a lambda itself cannot be pickled
    copy = pickle.loads(pickle.dumps(shards))
    assert [copy(7, w, 2) for w in range(2)] == [[0, 2, 4, 6], [1, 3, 5]]
    with pytest.raises(ValueError, match="n=7 and 2 workers"):
        copy(8, 0, 2)


def test_worker_stderr_catches_what_a_child_process_writes():
    import subprocess
    import sys

    from helpers.loading import worker_stderr

    with worker_stderr() as said:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('first\\nAttributeError: boom\\n')"], check=True)
    assert said.last_line() == "AttributeError: boom" and "first" in said.text
