"""Chapter 26's entry points under the real launcher (one 2-process gloo job: DTensor placements), and fsdp_memory's measuring helpers.

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


# ---- the measuring helpers of fsdp_memory, in this process (no process group, no launch) ----------


def test_unsharded_bytes_counts_a_plain_model_in_full_at_every_hook():
    from torch import nn

    from helpers.distributed.fsdp_memory import UnshardedBytes

    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    full = sum(p.nbytes for p in model.parameters())
    tracker = UnshardedBytes(model)
    assert tracker.sharded_bytes == 0, "a plain model has no DTensor shards"
    out = model(torch.randn(3, 8))
    assert tracker.sample("between forward and backward") == full
    assert [s[0] for s in tracker.samples] == ["pre 0", "post 0", "pre 2", "post 2", "between forward and backward"]
    assert all(s[1] == full and s[2] == 0 and s[3] == 0 for s in tracker.samples), "no gradients or FSDP buffers yet"
    out.sum().backward()
    backward = [s for s in tracker.samples[5:]]
    labels = [s[0] for s in backward]
    assert labels[0] == "backward 2", f"the output gradient of the last layer arrives first: {labels}"
    assert "backward 0" in labels and {"grad 0.weight", "grad 0.bias", "grad 2.weight", "grad 2.bias"} <= set(labels), labels
    assert backward[-1][2] == full, "after the last gradient is written every parameter has a full gradient"
    assert dict((s[0], s[2]) for s in backward)["grad 2.bias"] <= 2 * 4 + 2 * 4 * 4, "gradients are counted as they appear"
    tracker.remove()
    n = len(tracker.samples)
    model(torch.randn(3, 8)).sum().backward()
    assert len(tracker.samples) == n, "remove() should take every hook away, the gradient hooks too"


def test_unsharded_bytes_sees_a_freed_storage_as_zero():
    from torch import nn

    from helpers.distributed.fsdp_memory import UnshardedBytes

    model = nn.Linear(16, 16, bias=False)
    tracker = UnshardedBytes(model)
    assert tracker.live() == 16 * 16 * 4
    model.weight.data.untyped_storage().resize_(0)  # what FSDP does to an unsharded parameter when it reshards
    assert tracker.live() == 0


def test_padded_nbytes_rounds_dim0_up_to_the_world_size():
    from helpers.distributed.fsdp_memory import padded_nbytes

    assert padded_nbytes(torch.zeros(10, 3), 2) == 10 * 3 * 4  # even: no padding
    assert padded_nbytes(torch.zeros(10, 3), 4) == 12 * 3 * 4  # chunks of 3 rows on 4 ranks: 12 rows allocated
    assert padded_nbytes(torch.zeros(5), 2) == 6 * 4
    assert padded_nbytes(torch.zeros(3, 2, dtype=torch.bfloat16), 8) == 8 * 2 * 2  # more ranks than rows


def test_grad_scale_and_fraction_over():
    from torch import nn

    from helpers.distributed.fsdp_memory import _first_step, fraction_over, grad_scale

    grads = [torch.randn(4, 3), torch.randn(3)]
    assert abs(grad_scale([2 * g for g in grads], grads) - 2) < 1e-6
    assert abs(grad_scale(grads, grads) - 1) < 1e-6
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert fraction_over(a, b, 1e-6) == 0
    with torch.no_grad():
        b.bias += 1  # 2 of the 8 elements differ
    assert fraction_over(a, b, 1e-6) == 2 / 8
    samples = [("pre 0", 1, 0, 1), ("between forward and backward", 0, 0, 0), ("after backward", 0, 0, 0), ("pre 0", 5, 0, 5)]
    assert [s[0] for s in _first_step(samples)] == ["pre 0", "between forward and backward", "after backward"]
