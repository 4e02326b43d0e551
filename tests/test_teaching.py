"""helpers.teaching: TEACHING.md's chapter table comes from a run's report, and lists every chapter."""

from __future__ import annotations

import json
import re

import pytest

from helpers import teaching
from helpers.paths import chapter_source
from helpers.runner import chapters


def _report(**seconds):
    return {"smoke": False, "chapters": [{"chapter": stem, "status": "OK", "seconds": s} for stem, s in seconds.items()]}


def test_the_table_shows_measured_seconds_datasets_and_needs():
    table = {
        "05_mlp_mnist": {"title": "MLP", "datasets": ["mnist"], "accelerator": "none"},
        "20_cpp": {"title": "C++", "datasets": [], "accelerator": "cuda", "needs": ["compiler"]},
        "25_ddp": {"title": "DDP", "datasets": ["mnist"], "accelerator": "none", "needs": ["processes"]},
    }
    text = teaching.chapter_table(_report(**{"05_mlp_mnist": 41.6, "20_cpp": 120.2}), table)
    rows = text.splitlines()
    assert rows[2] == "| 05 | MLP | 42 s | mnist | - |"
    assert rows[3] == "| 20 | C++ | 120 s | - | compiler, GPU cells (skipped on CPU) |"
    assert rows[4] == "| 25 | DDP | not run | mnist | processes |"
    assert "All 2 chapters run, one after another: 3 minutes" in text
    with pytest.raises(ValueError, match="smoke run"):
        teaching.chapter_table({**_report(), "smoke": True}, table)
    with pytest.raises(ValueError, match="needs \\['gpu'\\]"):
        teaching.chapter_table(_report(), {"x": {"title": "x", "needs": ["gpu"]}})


def test_update_rewrites_only_the_marked_block(tmp_path, monkeypatch):
    doc = tmp_path / "TEACHING.md"
    doc.write_text(f"intro\n{teaching.START}\nold table\n{teaching.END}\noutro\n", encoding="utf-8")
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_report(**{stem: 10.0 for stem in chapters()})), encoding="utf-8")
    teaching.update(doc, report)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("intro\n") and text.endswith("\noutro\n") and "old table" not in text
    assert teaching.listed_chapters(text) == [stem[:2] for stem in chapters()]
    with pytest.raises(FileNotFoundError, match="make run"):
        teaching.update(doc, tmp_path / "missing.json")
    (tmp_path / "plain.md").write_text("no markers", encoding="utf-8")
    with pytest.raises(ValueError, match="needs the lines"):
        teaching.update(tmp_path / "plain.md", report)


def test_teaching_md_lists_every_chapter():
    assert teaching.main(["--check"]) == 0, "TEACHING.md's table is stale: make run, then make teaching"


def test_chapters_that_start_processes_say_so():
    # torchrun launches, or DataLoader workers, in a chapter's code (comments and markdown left out)
    starts = re.compile(r"torchrun\(|\blaunch\(|num_workers=(WORKERS|[1-9])")
    for stem, meta in chapters().items():
        code = [line for line in chapter_source(stem).read_text(encoding="utf-8").splitlines()
                if not line.lstrip().startswith("#")]
        if any(starts.search(line) for line in code):
            assert "processes" in meta.get("needs", []), f"{stem} starts processes: add needs: [processes] in chapters.yaml"
