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


def _suite(plugin):
    """Node ids shaped like the real suite: every chapter's nbval cells and smoke run, and unit tests."""
    from helpers.runner import chapters

    ids = [f"tests/test_{name}.py::test_{i}" for name in ("data", "bench", "ch06_spawn") for i in range(3)]
    for stem in chapters():
        ids += [f"notebooks/{stem}.ipynb::Cell {c}" for c in range(3)]
        ids.append(f"tests/test_notebooks_run.py::test_notebook_runs_with_smoke_parameters[{stem}]")
    ids.append("tests/test_notebooks_run.py::test_runner_judges_a_run[ok]")
    return ids


class _Config:
    def __init__(self, shard):
        self.shard, self.deselected = shard, []
        self.hook = self

    def getoption(self, name, default=None):
        return self.shard

    def pytest_deselected(self, items):
        self.deselected += items


class _Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_partition_the_notebooks_and_run_the_unit_tests_once(plugin, n):
    ids = _suite(plugin)
    kept = []
    for k in range(1, n + 1):
        items = [_Item(i) for i in ids]
        config = _Config(f"{k}/{n}")
        plugin.pytest_collection_modifyitems(config, items)
        assert len(items) + len(config.deselected) == len(ids)
        kept.append({item.nodeid for item in items})
    assert sorted(i for shard in kept for i in shard) == sorted(ids), "every test in exactly one shard"
    for stem in {plugin.shard_unit(plugin.group_of(i)) for i in ids}:
        owners = [k for k, shard in enumerate(kept) if any(plugin.shard_unit(plugin.group_of(i)) == stem for i in shard)]
        assert len(owners) == 1, f"{stem} is split over shards {owners}"
    assert plugin.shard_unit("tests/test_data.py") == "tests/test_data.py"  # unit-test files spread too


def test_the_plan_is_balanced_by_recorded_seconds_and_deterministic(plugin):
    cost = {"a": 100.0, "b": 60.0, "c": 50.0, "d": 40.0, "e": 10.0}
    plan = plugin.shard_plan(list(cost), 2, cost)
    assert plan == {"a": 1, "b": 2, "c": 2, "d": 1, "e": 2}  # loads 140 and 120
    assert plugin.shard_plan(list(reversed(cost)), 2, cost) == plan
    loads = [sum(cost[u] for u, k in plan.items() if k == shard) for shard in (1, 2)]
    assert max(loads) - min(loads) <= max(cost.values())
    # a unit with no record counts as the median of the others
    assert plugin.shard_plan(["a", "b", "new"], 2, {"a": 100.0, "b": 1.0}) == {"a": 1, "new": 2, "b": 1}


@pytest.mark.parametrize("bad", ["0/2", "3/2", "2", "a/b", "1/0", ""])
def test_a_malformed_shard_is_a_usage_error(plugin, bad):
    with pytest.raises(ValueError, match="SHARD must be k/N"):
        plugin.parse_shard(bad)
    if bad:
        with pytest.raises(pytest.UsageError, match="e.g. SHARD=2/3"):
            plugin.pytest_collection_modifyitems(_Config(bad), [_Item("tests/test_a.py::t")])
