"""Chapter 26's entry points under the real launcher: one 2-process gloo job (DTensor placements).

This is the suite's one real successful multi-process job (tests/test_distributed.py runs the
failing one), so it also checks the per-rank output and that no process is left behind.
"""

from __future__ import annotations

import json

import torch

from helpers.distributed.launch import torchrun
from tests.test_distributed import assert_nothing_left


def test_mesh_placements_two_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "build"))  # logs of this job stay in tmp_path
    out = tmp_path / "placements"
    result = torchrun("helpers.distributed.mesh_placements", "--out", str(out), "--rows", "5", "--cols", "3",
                      nproc=2, timeout=240)
    assert result.returncode == 0 and not result.timed_out
    assert_nothing_left(result)
    data = json.loads((out / "placements.json").read_text())
    assert data["world"] == 2
    matrix = torch.tensor(data["matrix"])
    for label, info in data["placements"].items():
        assert info["full_tensor_equal"], label
        assert [r["rank"] for r in info["ranks"]] == [0, 1], label
        # the local pieces, put back at their offsets, rebuild the matrix
        rebuilt = torch.full_like(matrix, float("nan"))
        for shard in info["ranks"]:
            (r0, c0), (nr, nc) = shard["offset"], shard["shape"]
            rebuilt[r0:r0 + nr, c0:c0 + nc] = torch.tensor(shard["values"]).reshape(nr, nc)
        assert torch.equal(rebuilt, matrix), label
    assert [r["shape"] for r in data["placements"]["Shard(0)"]["ranks"]] == [[3, 3], [2, 3]]  # torch.chunk: 3 + 2 rows
    assert [r["shape"] for r in data["placements"]["Shard(1)"]["ranks"]] == [[5, 2], [5, 1]]
    assert any(line.startswith("Shard(0): local shape (2, 3)") for line in result.rank_lines(1)), "rank_lines mixed the ranks"
    assert any(line.startswith("Shard(0): local shape (3, 3)") for line in result.rank_lines(0)), "rank_lines mixed the ranks"
