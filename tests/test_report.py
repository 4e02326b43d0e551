"""helpers.report and the runner's report writer."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.report import ChapterReport, machine_device, read_figures
from helpers.runner import ChapterResult, chapters, write_report


def test_record_and_finish_write_json(isolated_dirs):
    rep = ChapterReport("05_demo")
    assert read_figures("05_demo") == {"chapter": "05_demo", "figures": {}, "complete": False, "seconds": None,
                                       "torch": torch.__version__, "device": machine_device()}
    assert torch.accelerator.is_available() or machine_device() == "cpu"
    assert rep.record("test accuracy", 98.123456, "%") == 98.123456
    rep.record("device", "cpu")
    stored = read_figures("05_demo")
    assert stored["figures"]["test accuracy"] == {"value": 98.1235, "unit": "%"}
    assert stored["complete"] is False
    rep.finish()
    assert read_figures("05_demo")["complete"] is True


def test_a_new_run_drops_stale_figures(isolated_dirs):
    ChapterReport("05_demo").record("old", 1)
    ChapterReport("05_demo")
    assert read_figures("05_demo")["figures"] == {}


def test_tensors_are_refused_with_a_hint(isolated_dirs):
    with pytest.raises(TypeError, match=r"\.item\(\)"):
        ChapterReport("05_demo").record("acc", torch.tensor(0.9))


def test_report_lists_failures_with_their_cell(tmp_path):
    results = [
        ChapterResult("00_a", "A", "OK", 3.0, {"device": {"value": "cpu", "unit": ""}}),
        ChapterResult("01_b", "B", "FAILED", 1.5, {}, "cell [7] raised ValueError: boom"),
    ]
    md = write_report(results, tmp_path).read_text()
    assert "1 of 2 chapters OK" in md
    assert "| 00_a | A | OK | 3.0 | device cpu |" in md
    partial = write_report(results, tmp_path, planned=5).read_text()
    assert "3 more still to run" in partial
    assert "**FAILED**: cell [7] raised ValueError: boom" in md
    payload = json.loads((tmp_path / "report.json").read_text())
    assert [c["status"] for c in payload["chapters"]] == ["OK", "FAILED"]
    pipes = write_report([ChapterResult("09_d", "D", "OK", 1.0, {"max |a - b|": {"value": 0.1, "unit": ""}})], tmp_path).read_text()
    assert "| max \\|a - b\\| 0.1 |" in pipes, "a figure name with | must not split the table row"
    weird = write_report([ChapterResult("02_c", "C", "FAILED", 1.0, {}, "line one\nline | two")], tmp_path).read_text()
    assert "line one line \\| two |" in weird, "an error message must stay inside its table row"


def test_chapter_table_is_well_formed():
    table = chapters()
    assert list(table) == sorted(table), "chapters.yaml must list chapters in course order"
    for stem, meta in table.items():
        assert meta["accelerator"] in ("none", "cuda"), stem
        assert isinstance(meta["smoke"], dict), stem


def test_units_are_spaced_like_the_report_prints_them():
    from helpers.report import format_figure

    assert format_figure(97.8, "%") == "97.8%"
    assert format_figure(3.1, "x") == "3.1x"
    assert format_figure(0.42, "s") == "0.42 s"
    assert format_figure(12, "") == "12"


def test_the_run_stamp_comes_from_the_kernels_record(isolated_dirs):
    from helpers.authoring import run_stamp

    with pytest.raises(RuntimeError, match="ChapterReport"):
        run_stamp("05_demo", 3.0)  # the notebook never created its report
    ChapterReport("05_demo")
    stamp = run_stamp("05_demo", 12.6)
    assert stamp["torch"] == torch.__version__ and stamp["seconds"] == 13
    assert stamp["device"] == machine_device()
    assert len(stamp["date"]) == 10 and stamp["date"][4] == "-"
