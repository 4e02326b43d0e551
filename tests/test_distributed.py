"""The distributed launcher (helpers.distributed.launch), kept cheap for CI.

Only one test starts ranks that import torch (the failing-rank job); the timeout test
runs the torch-free ``sleeper`` entry point, and the log parsing and pruning are tested
on folders written here. Chapter 26's test runs the one real successful 2-process job.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from helpers.distributed import backend
from helpers.distributed.launch import (
    DistributedRunError,
    RunResult,
    free_port,
    prune_log_dirs,
    rank_failures,
    torchrun,
)


@pytest.fixture
def own_build(tmp_path, monkeypatch):
    """Logs and results of this test's job go to a temporary build folder (the ranks inherit it)."""
    monkeypatch.setenv("COURSE_BUILD_DIR", str(tmp_path / "build"))
    return tmp_path / "build"


def _gone(pid: int) -> bool:
    """True if ``pid`` no longer runs (a zombie not yet reaped by its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def assert_nothing_left(result: RunResult) -> None:
    assert result.pids, "the launcher recorded no process ids"
    alive = [pid for pid in result.pids if not _gone(pid)]
    assert not alive, f"processes left running after the job: {alive}"
    # torchrun leads its own group, and each rank leads its own (torchrun starts ranks in new sessions)
    groups = [pid for pid in result.pids if not _group_gone(pid)]
    assert not groups, f"process groups still alive: {groups}"


def test_free_port_is_bindable():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # free right after it was handed out


def test_backend_is_gloo_without_enough_gpus():
    import torch

    expected = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    assert backend(2) == expected
    assert backend(10_000) == "gloo"


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        torchrun("helpers.distributed.sleeper", nproc=0)
    with pytest.raises(ValueError):
        torchrun("helpers.distributed.sleeper", timeout=0)


def test_timeout_kills_every_rank(own_build):
    # torch-free ranks that sleep forever. The timeout must fire after they started; torchrun itself
    # imports torch first (slow on a busy machine), so a run stopped before any rank printed is retried longer.
    for timeout in (6, 20, 60):
        with pytest.raises(DistributedRunError) as info:
            torchrun("helpers.distributed.sleeper", "--seconds", "600", nproc=2, timeout=timeout, grace=1)
        result = info.value.result
        assert result.timed_out and "timed out" in str(info.value)
        assert result.seconds < timeout + 15, "stopping the job took far longer than the grace period"
        assert_nothing_left(result)
        if all(any(line.startswith("pid ") for line in result.rank_lines(r)) for r in (0, 1)):
            break
    else:
        pytest.fail(f"the ranks never started before the timeout:\n{result.output[-2000:]}")
    assert len(result.pids) >= 3, f"expected torchrun and two ranks, saw {result.pids}"
    # the per-rank prefixes and the environment torchrun and the launcher set
    for rank in (0, 1):
        env = dict(line.split("=", 1) for line in result.rank_lines(rank) if "=" in line)
        assert env["RANK"] == str(rank) and env["LOCAL_RANK"] == str(rank), env
        assert env["WORLD_SIZE"] == "2" and env["OMP_NUM_THREADS"] == "1", env
    assert result.log_dir and (own_build / "distributed" / "sleeper").is_dir()


def test_failing_rank_is_named_with_its_traceback(own_build):
    with pytest.raises(DistributedRunError) as info:
        torchrun("helpers.distributed.fail_rank", "--fail-rank", "1", nproc=2, timeout=180)
    err = info.value
    assert err.result.returncode != 0 and not err.result.timed_out
    assert err.root_cause is not None and err.root_cause.rank == 1, str(err)
    assert err.ranks[0] == 1
    message = str(err)
    assert "rank 1 failed first" in message
    assert "Traceback" in message and "ValueError: shard 1 is corrupt" in message and "load_shard" in message
    assert_nothing_left(err.result)


def _rank_dir(root, attempt, rank):
    path = root / "job_abc" / f"attempt_{attempt}" / str(rank)
    path.mkdir(parents=True)
    return path


def test_rank_failures_reads_error_files_and_logs(tmp_path):
    root = tmp_path / "logs"
    # attempt 0: rank 1 failed first (its failed_at is earlier), rank 0 as a consequence
    for rank, message, when in ((0, "RuntimeError: Connection closed by peer", 200.0), (1, "ValueError: bad shard", 100.0)):
        rank_dir = _rank_dir(root, 0, rank)
        trace = f"Traceback (most recent call last):\n  File \"x.py\", line 1, in main\n{message}"
        error = {"message": {"message": message, "extraInfo": {"py_callstack": trace, "timestamp": "0"}}}
        (rank_dir / "error.json").write_text(json.dumps(error))
        (rank_dir / "failed_at").write_text(f"{when}\n")
    # attempt 1: rank 0 died before Python could raise (no error.json, no traceback in its log)
    rank_dir = _rank_dir(root, 1, 0)
    (rank_dir / "stderr.log").write_text("/usr/bin/python: No module named helpers.nothing\n")
    _rank_dir(root, 1, 1)  # a rank with nothing to report

    failures = rank_failures(root, failed=True)
    assert [(f.attempt, f.rank) for f in failures] == [(0, 1), (0, 0), (1, 0)]
    assert failures[0].last_line == "ValueError: bad shard"
    assert "No module named" in failures[-1].traceback
    # without failed=True a log without a traceback is not taken for an error
    assert [(f.attempt, f.rank) for f in rank_failures(root)] == [(0, 1), (0, 0)]


def test_prune_log_dirs_keeps_the_newest(tmp_path):
    old = time.time() - 7200
    for k in range(5):
        folder = tmp_path / f"job{k}"
        folder.mkdir()
        os.utime(folder, (old + k, old + k))
    (tmp_path / "running").mkdir()  # recent: never pruned, whatever its rank
    removed = prune_log_dirs(tmp_path, keep=3, min_age_s=3600)
    assert sorted(p.name for p in removed) == ["job0", "job1", "job2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job3", "job4", "running"]


def test_no_sync_accumulation_counts_one_allreduce_per_step():
    """ddp_equivalence.accumulate in a 1-rank gloo group (no launch): no_sync skips all but the last all-reduce."""
    import torch
    import torch.distributed as dist

    from helpers.distributed.common import Context
    from helpers.distributed.ddp_equivalence import accumulate

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ctx = Context(0, 1, 0, 1, "gloo", torch.device("cpu"), 0)
        quiet = accumulate(ctx, 3, 4, 0, use_no_sync=True)
        loud = accumulate(ctx, 3, 4, 0, use_no_sync=False)
    finally:
        dist.destroy_process_group()
    assert quiet["hook_calls_per_micro_batch"] == [0, 0, 1]
    assert loud["hook_calls_per_micro_batch"] == [1, 1, 1]
    assert quiet["max_abs_diff_vs_large_batch"] < 1e-12 and loud["max_abs_diff_vs_large_batch"] < 1e-12


def test_fake_download_and_get_file(tmp_path):
    from helpers.distributed.ddp_train import fake_download, get_file, is_complete

    path = tmp_path / "data.bin"
    assert get_file(path) is True and is_complete(path)
    assert get_file(path) is False, "a present file is not downloaded again"
    with open(path, "r+b") as f:
        f.truncate(1000)  # what a reader sees in the middle of a download
    assert not is_complete(path)
    fake_download(path)
    assert is_complete(path)


def test_fake_download_pauses_after_its_first_chunk(tmp_path):
    """The naive race's hook runs once, when exactly one chunk is on disk: a reader then sees a torn file."""
    from helpers.distributed.ddp_train import CHUNK_BYTES, fake_download, get_file, is_complete

    path = tmp_path / "data.bin"
    seen = []

    def look():
        seen.append((path.stat().st_size, is_complete(path), get_file(path)))  # what another rank would find

    fake_download(path, after_first_chunk=look)
    assert seen == [(CHUNK_BYTES, False, False)], seen
    assert is_complete(path)
