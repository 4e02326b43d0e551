"""The root conftest's test scheduling: which tests share a worker, and in what order."""

from __future__ import annotations

import importlib.util
import json

import pytest

from helpers.paths import ROOT


@pytest.fixture(scope="module")
def plugin():
    spec = importlib.util.spec_from_file_location("course_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cells_of_one_notebook_share_a_group(plugin):
    assert plugin.group_of("notebooks/05_mlp_mnist.ipynb::Cell 0") == "notebooks/05_mlp_mnist.ipynb"
    assert plugin.group_of("notebooks/05_mlp_mnist.ipynb::Cell 31") == "notebooks/05_mlp_mnist.ipynb"


def test_each_smoke_run_is_its_own_group(plugin):
    a = plugin.group_of("tests/test_notebooks_run.py::test_notebook_runs_with_smoke_parameters[05_mlp_mnist]")
    b = plugin.group_of("tests/test_notebooks_run.py::test_notebook_runs_with_smoke_parameters[07_cnn_cifar10]")
    assert (a, b) == ("smoke:05_mlp_mnist", "smoke:07_cnn_cifar10")
    # the runner's own tests in that file stay together, as under loadfile
    other = plugin.group_of("tests/test_notebooks_run.py::test_runner_judges_a_run[ok]")
    assert other == "tests/test_notebooks_run.py"


def test_other_tests_group_by_file_and_ignore_xdist_suffix(plugin):
    assert plugin.group_of("tests/test_data.py::TestX::test_y[a-b]") == "tests/test_data.py"
    assert plugin.group_of("tests/test_data.py::test_y@somegroup") == "tests/test_data.py"


def test_recorded_seconds_tolerates_a_missing_or_corrupt_file(plugin, tmp_path, monkeypatch):
    monkeypatch.setattr(plugin, "RECORDED_SECONDS", tmp_path / "missing.json")
    assert plugin.recorded_seconds() == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(plugin, "RECORDED_SECONDS", bad)
    assert plugin.recorded_seconds() == {}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"smoke:05_mlp_mnist": 20.5, "junk": "x"}), encoding="utf-8")
    monkeypatch.setattr(plugin, "RECORDED_SECONDS", good)
    assert plugin.recorded_seconds() == {"smoke:05_mlp_mnist": 20.5}


def test_longest_groups_are_collected_first_and_cells_keep_their_order(plugin, tmp_path, monkeypatch):
    table = tmp_path / "seconds.json"
    table.write_text(json.dumps({"notebooks/07_x.ipynb": 90.0, "smoke:05_y": 20.0}), encoding="utf-8")
    monkeypatch.setattr(plugin, "RECORDED_SECONDS", table)

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    ids = [
        "tests/test_a.py::test_one",
        "tests/test_notebooks_run.py::test_notebook_runs_with_smoke_parameters[05_y]",
        "notebooks/07_x.ipynb::Cell 0",
        "notebooks/07_x.ipynb::Cell 1",
        "notebooks/07_x.ipynb::Cell 2",
    ]
    items = [Item(i) for i in ids]
    plugin.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ids[2:] + [ids[1], ids[0]]


def test_multiprocess_groups_share_one_unit_and_its_summed_cost_orders_it(plugin, tmp_path, monkeypatch):
    ddp_cell = "notebooks/25_ddp.ipynb::Cell 3"
    ddp_smoke = "tests/test_notebooks_run.py::test_notebook_runs_with_smoke_parameters[25_ddp]"
    spawn = "tests/test_ch06_spawn.py::test_chapter_06_prints_the_stored_checked_output_under_spawn"
    assert {plugin.unit_of(i) for i in (ddp_cell, ddp_smoke, spawn)} == {"multiprocess"}
    assert plugin.unit_of("notebooks/05_mlp_mnist.ipynb::Cell 0") == "notebooks/05_mlp_mnist.ipynb"
    assert plugin.unit_of("tests/test_ch06_spawn.py::test_shard_functions") == "multiprocess"  # whole file
    # 40 + 30 s of multi-process groups outrank a 60 s notebook; the unit's items keep their order
    table = tmp_path / "seconds.json"
    table.write_text(json.dumps({"notebooks/25_ddp.ipynb": 40.0, "smoke:25_ddp": 30.0,
                                 "notebooks/07_x.ipynb": 60.0}), encoding="utf-8")
    monkeypatch.setattr(plugin, "RECORDED_SECONDS", table)

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    ids = ["notebooks/07_x.ipynb::Cell 0", ddp_cell, "notebooks/07_x.ipynb::Cell 1", ddp_smoke]
    items = [Item(i) for i in ids]
    plugin.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [ddp_cell, ddp_smoke, ids[0], ids[2]]
