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
