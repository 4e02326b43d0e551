"""The course site's sources (``helpers.site``), without running Sphinx.

What the pages are built from: the table of contents against
``notebooks/chapters.yaml``, the stamp of every stored run, a closed solution
after every exercise's checker, alt text for every figure, and the clear
failure for a notebook the site cannot stamp. ``test_site_browser.py`` checks
the built HTML.
"""

from __future__ import annotations

import copy
import json
import re

import pytest

from helpers import site

TABLE = site.chapters()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The site's sources as :func:`helpers.site.write_sources` writes them: (folder, stems)."""
    folder = tmp_path_factory.mktemp("site_src")
    return folder, site.write_sources(folder)


def _notebook(path, setup_output: str, last_output: str, metadata: dict | None = None) -> dict:
    """A two-cell chapter notebook written to ``path``, with the given stored outputs."""
    def stream(text):
        return [{"output_type": "stream", "name": "stdout", "text": text}]

    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata or {}, "cells": [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# 99 · A test\n\nIt tests. It does."},
        {"cell_type": "code", "id": "b", "metadata": {}, "execution_count": 1,
         "source": 'report = ChapterReport("99_test")', "outputs": stream(setup_output)},
        {"cell_type": "code", "id": "c", "metadata": {}, "execution_count": 2,
         "source": "report.finish()", "outputs": stream(last_output)},
    ]}
    path.write_text(json.dumps(nb), encoding="utf-8")
    return nb


# --------------------------------------------------------------------------
# Table of contents
# --------------------------------------------------------------------------


def test_the_chapter_table_is_every_notebook_once():
    on_disk = sorted(p.stem for p in site.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert list(TABLE) == on_disk, "chapters.yaml and notebooks/*.ipynb list different chapters (or another order)"


def test_the_toctree_follows_chapters_yaml(sources):
    folder, stems = sources
    assert stems == list(TABLE)
    index = (folder / "index.md").read_text(encoding="utf-8")
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S)
    assert toctree, "index.md has no toctree"
    entries = [line for line in toctree.group(1).splitlines() if line and not line.startswith(":")]
    assert entries == [f"{stem[:2]} · {row['title']} <{stem}>" for stem, row in TABLE.items()]
    # The chapter table links every chapter once, in the same order.
    assert re.findall(r"\]\((\d\d_\w+)\.ipynb\)", index) == list(TABLE)
    # Each page's own title (what the previous/next links show) is the same text.
    for stem, row in TABLE.items():
        nb = json.loads((folder / f"{stem}.ipynb").read_text(encoding="utf-8"))
        assert site.cell_source(nb["cells"][0]).split("\n", 1)[0] == f"# {stem[:2]} · {row['title']}"
    assert not (set(p.stem for p in folder.glob("*.ipynb")) - set(TABLE)), "a stale chapter was left in the sources"


def test_the_index_says_what_runs_where(sources):
    folder, _ = sources
    index = (folder / "index.md").read_text(encoding="utf-8")
    assert "make lab" in index and "make run" in index
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (\d\d) \|.*$", index, re.M)}
    for stem, row in TABLE.items():
        line = rows[stem[:2]]
        assert ("GPU-only cells" in line) == (row.get("accelerator") == "cuda"), line
        for dataset in row.get("datasets") or []:
            assert f"`{dataset}`" in line, (stem, dataset)
        for need in row.get("needs") or []:
            assert site.NEEDS[need] in line, (stem, need)


def test_the_summary_is_the_first_sentence_after_the_title():
    nb = {"cells": [{"cell_type": "markdown", "source": "# 99 · Title\n\nFirst one, e.g. `x.y()`. Second one.\n\n"
                                                         "**What you will learn**"}]}
    assert site.chapter_summary(nb) == "First one, e.g. `x.y()`."
    for stem in TABLE:
        summary = site.chapter_summary(site.read_notebook(site.NOTEBOOKS / f"{stem}.ipynb"))
        assert 20 < len(summary) < 300 and summary[-1] in ".!?", (stem, summary)


# --------------------------------------------------------------------------
# The stamp of the stored run
# --------------------------------------------------------------------------


@pytest.mark.parametrize("stem", list(TABLE))
def test_every_stored_run_gets_a_complete_stamp(stem):
    path = site.NOTEBOOKS / f"{stem}.ipynb"
    stamp = site.run_stamp(site.read_notebook(path), path)
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", stamp.torch), stamp
    assert stamp.device.strip(), stamp
    if stamp.source == "derived":  # a recorded run may name the GPU: "cuda (NVIDIA H200)"
        assert re.fullmatch(r"cpu|cuda(:\d+)?|mps|xpu", stamp.device), stamp
    assert stamp.seconds > 0, stamp
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", stamp.date), stamp
    assert stamp.date_kind in {"ran", "committed", "file date"}, stamp
    text = stamp.text()
    assert f"torch {stamp.torch}" in text and stamp.device in text and stamp.date in text, text


def test_the_stamp_is_derived_from_the_outputs(tmp_path):
    path = tmp_path / "99_test.ipynb"
    nb = _notebook(path, "torch 2.14.1+cu130, device for the plotting grid: cpu, 2 CPU threads\n",
                   "ChapterReport('99_test') finished in 3.0 s\nChapterReport('99_test') finished in 12.4 s\n")
    stamp = site.run_stamp(nb, path)
    assert (stamp.torch, stamp.device, stamp.seconds, stamp.source) == ("2.14.1+cu130", "cpu", 12.4, "derived")
    assert stamp.date_kind == "file date"  # a file git does not track: its modification date
    assert stamp.text().startswith("stored run: torch 2.14.1+cu130 · cpu · 12 s · file date ")


@pytest.mark.parametrize("output, device", [
    ("device cpu, 2 CPU threads", "cpu"),
    ("device: cuda:0", "cuda:0"),
    ("torch 2.14.1, 2 CPU threads; pick_device() chose mps", "mps"),
    ("this notebook on cuda; jobs on 2 ranks use nccl", "cuda"),
    ("2 CPU threads; CUDA GPU visible: False", None),
])
def test_the_device_is_the_first_device_word_after_a_cue(output, device):
    nb = {"cells": [{"cell_type": "code", "source": "report = ChapterReport('x')",
                     "outputs": [{"output_type": "stream", "name": "stdout", "text": output}]}]}
    assert site.run_device(nb) == device


def test_the_recorded_run_wins_over_the_outputs(tmp_path):
    path = tmp_path / "99_test.ipynb"
    run = {"torch": "2.15.0", "device": "cuda", "date": "2027-01-02", "seconds": 61}
    nb = _notebook(path, "torch 2.14.1, device cpu", "finished in 5.0 s", {"course": {"run": run}})
    stamp = site.run_stamp(nb, path)
    assert (stamp.torch, stamp.device, stamp.seconds, stamp.date, stamp.source) == ("2.15.0", "cuda", 61, "2027-01-02",
                                                                                     "recorded")
    del run["seconds"]
    with pytest.raises(site.SiteError, match=r"99_test\.ipynb: metadata\.course\.run has no seconds"):
        site.run_stamp(nb, path)


def test_a_notebook_without_a_run_time_fails_clearly(tmp_path):
    path = tmp_path / "99_test.ipynb"
    nb = _notebook(path, "torch 2.14.1, device cpu", "the last cell printed something else\n")
    with pytest.raises(site.SiteError) as err:
        site.run_stamp(nb, path)
    message = str(err.value)
    assert "99_test.ipynb" in message and "no run time" in message and "finished in N s" in message, message
    assert "torch version" not in message and "no device" not in message, "only the missing part is named"


def test_a_notebook_without_a_device_fails_clearly(tmp_path):
    path = tmp_path / "99_test.ipynb"
    nb = _notebook(path, "torch 2.14.1, 2 CPU threads", "finished in 5.0 s")
    with pytest.raises(site.SiteError, match=r"99_test\.ipynb: cannot stamp the stored run: no device"):
        site.run_stamp(nb, path)


# --------------------------------------------------------------------------
# Exercises: a closed solution after each checker
# --------------------------------------------------------------------------


@pytest.mark.parametrize("stem", list(TABLE))
def test_each_exercise_gets_a_closed_solution(sources, stem):
    folder, _ = sources
    cells = json.loads((folder / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    references = site.reference_sources(stem[:2])
    checked = []
    for i, cell in enumerate(cells):
        names = site.checker_names(site.cell_source(cell)) if cell["cell_type"] == "code" else []
        for k, name in enumerate(names, start=1):
            block = site.cell_source(cells[i + k])
            assert block.startswith(":::{dropdown} Show solution\n"), f"{stem}: no solution after check({name!r})"
            assert ":open:" not in block, f"{stem}: the solution of {name} starts open"
            assert references[name] in block, f"{stem}: the solution of {name} is not its reference's source"
            checked.append(name)
    assert len(checked) >= 2, f"{stem}: {len(checked)} exercises"
    assert sorted(checked) == sorted(references), f"{stem}: checkers {checked}, references {sorted(references)}"


def test_a_reference_is_its_functions_source():
    refs = site.reference_sources("04")
    assert refs["04.closed_form_fit"].startswith("def _closed_form_fit(x: torch.Tensor, y: torch.Tensor)")
    assert "torch.linalg.lstsq" in refs["04.closed_form_fit"]
    assert site.reference_sources("03")["03.standardize"].startswith("class Standardize")
    cpp = site.reference_sources("20")["20.l2_normalize_rows"]  # returns a C++ string: the string comes first
    assert cpp.startswith("_REFERENCE_CPP = ") and cpp.rstrip().endswith("return _REFERENCE_CPP")


def test_a_checker_without_a_reference_fails(tmp_path):
    path = tmp_path / "99_test.ipynb"
    nb = _notebook(path, "torch 2.14.1, device cpu", "finished in 5.0 s")
    nb["cells"][2]["source"] = 'result = check("99.nothing", my_answer)'
    stamp = site.run_stamp(nb, path)
    with pytest.raises(site.SiteError, match=r"checks 99\.nothing, which has no reference solution"):
        site.site_notebook("99_test", nb, "A test", stamp, {})
    assert site.checker_names('result = check("05.train_step", train_step)\ncheck( "05.b", f)') == ["05.train_step",
                                                                                                    "05.b"]


def test_hidden_solutions_stay_off_the_site(tmp_path, monkeypatch):
    stem = "04_linear_regression"
    nb = site.read_notebook(site.NOTEBOOKS / f"{stem}.ipynb")
    original = copy.deepcopy(nb)
    stamp = site.run_stamp(nb, site.NOTEBOOKS / f"{stem}.ipynb")
    shown = site.site_notebook(stem, nb, TABLE[stem]["title"], stamp, site.reference_sources("04"))
    assert nb == original, "site_notebook changed the notebook it was given"
    assert len(shown["cells"]) == len(nb["cells"]) + 2
    monkeypatch.setenv("COURSE_HIDE_SOLUTIONS", "1")
    assert site.solutions_hidden()
    hidden = site.site_notebook(stem, nb, TABLE[stem]["title"], stamp, None)
    assert len(hidden["cells"]) == len(nb["cells"])


# --------------------------------------------------------------------------
# Alt text
# --------------------------------------------------------------------------


@pytest.mark.parametrize("source, heading, alt", [
    ('fig.suptitle("Loss curves")\nax.set_title(f"epoch {e}")', "Training", "Figure: Loss curves; epoch …"),
    ('plot_curves(h, title="test accuracy")\nplt.title("$\\\\alpha$ = 0.1")', None,
     "Figure: test accuracy; alpha = 0.1"),
    ("%matplotlib inline\nplt.plot(x, y)\nplt.show()", "Why **`zero_grad`** matters", "Figure: Why zero_grad matters"),
    ('ax.set_title(f"({a}, {b})")\nax.set_title("same")\nax2.set_title("same")', "The data", "Figure: same"),
    ('ax.set_title(f"({a}, {b})")', "[The data](x.md)", "Figure: The data"),
])
def test_alt_text_comes_from_the_titles_or_the_heading(source, heading, alt):
    assert site.figure_alt(source, heading) == alt


def test_a_figure_with_nothing_to_say_fails():
    with pytest.raises(site.SiteError, match="neither a title"):
        site.figure_alt("plt.plot(x)", None)


def test_every_figure_has_alt_text(sources):
    folder, stems = sources
    figures = 0
    for stem in stems:
        for cell in json.loads((folder / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]:
            if any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
                alt = cell["metadata"]["mystnb"]["image"]["alt"]
                assert alt.startswith("Figure: ") and len(alt) > len("Figure: ") + 2, (stem, alt)
                figures += 1
    assert figures >= len(stems), f"only {figures} figures in {len(stems)} chapters"


def test_no_absolute_path_in_the_sources(sources):
    folder, stems = sources
    root = str(site.ROOT)
    for name in ["index.md", *(f"{s}.ipynb" for s in stems)]:
        assert root not in (folder / name).read_text(encoding="utf-8"), f"{name} holds the checkout's path"


def test_the_site_shows_code_without_test_and_lint_directives():
    source = ("# NBVAL_CHECK_OUTPUT\nx = 1  # noqa: E402\nimport helpers.plotting  # noqa: F401  (figure defaults)\n"
              "y = 2  # a comment\nexcept Exception:  # noqa: BLE001, S110 (reported)")
    assert site.reader_code(source) == ("x = 1\nimport helpers.plotting  # (figure defaults)\ny = 2  # a comment\n"
                                        "except Exception:  # (reported)")
    assert site.reader_code("x = 1\n# NBVAL_CHECK_OUTPUT") == "x = 1\n# NBVAL_CHECK_OUTPUT", "only a first line is a directive"
    for stem in site.chapters():
        nb = site.site_notebook(stem, site.read_notebook(site.NOTEBOOKS / f"{stem}.ipynb"), "t",
                                site.RunStamp("2.14.1", "cpu", 1.0, "2026-12-02", "recorded", "ran"), None)
        code = [site.cell_source(c) for c in nb["cells"] if c["cell_type"] == "code"]
        assert not any(c.startswith("# NBVAL_CHECK_OUTPUT") for c in code), stem
        assert not any(re.search(r"#\s*noqa\b", c) for c in code), stem


def test_the_site_colours_code_as_plain_python(sources):
    """helpers.site asks Pygments for its Python lexer; an IPython %magic or !command would need the IPython one."""
    folder, stems = sources
    for stem in stems:
        nb = json.loads((folder / f"{stem}.ipynb").read_text(encoding="utf-8"))
        assert nb["metadata"]["language_info"]["pygments_lexer"] == "python3", stem
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                lines = [line.lstrip() for line in site.cell_source(cell).splitlines()]
                ipython = [line for line in lines if line.startswith(("%", "!"))]
                assert not ipython, f"{stem}: IPython syntax {ipython}; give site_notebook the ipython3 lexer back"
