"""Run a module under ``torchrun`` from a notebook or a test, and never leave a rank behind.

:func:`torchrun` starts ``python -m torch.distributed.run`` as a subprocess
(with the course's Python), on a rendezvous port that is free right now, so
two notebooks can launch jobs at the same time. Every line a rank prints comes
back prefixed with ``[rank N]`` in :attr:`RunResult.output`, in the order the
launcher saw it; torchrun's per-rank logs (``stdout.log``, ``stderr.log`` and
``error.json`` per attempt and local rank) stay under ``build/distributed/<entry>/``,
where only the newest :data:`KEEP_LOG_DIRS` job folders are kept (older ones are pruned
at each launch, see :func:`prune_log_dirs`).

Processes: torchrun starts each rank in a session of its own, so killing
torchrun's process group alone would orphan the ranks. The launcher therefore
watches the process tree while the job runs (through ``/proc``) and, on a
timeout, first sends SIGTERM to torchrun's group (torchrun then stops its
ranks), and after a grace period sends SIGKILL to every process it saw that is
still alive. After any run, successful or not, nothing it started is left.

Failures: with ``check=True`` a non-zero exit, and always a timeout, raise
:class:`DistributedRunError`; its message names the failing rank(s) and shows
their traceback, read from the ``error.json`` that
``torch.distributed.elastic.multiprocessing.errors.record`` writes (or from
the rank's ``stderr.log`` when there is none).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..bars import elapsed_bar
from ..paths import ROOT, build_dir, rel

__all__ = [
    "DistributedRunError", "RankFailure", "RunResult", "free_port", "prune_log_dirs", "rank_failures", "torchrun",
]  # fmt: skip

#: How many log folders :func:`torchrun` keeps per entry point under ``build/distributed/<entry>/``.
KEEP_LOG_DIRS = 10
#: A log folder younger than this (seconds since it was last changed) is never pruned: its job may still run.
PRUNE_MIN_AGE_S = 3600.0

_PREFIX = re.compile(r"^\[rank (\d+)\] ?(.*)$")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (bind to port 0, read it, close).

    Another program could take it before you use it; the window is short, and
    each launch asks for a new one.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class RunResult:
    """What a :func:`torchrun` job left behind."""

    returncode: int
    #: everything the job printed (torchrun and all ranks, stdout and stderr merged, in order)
    output: str
    seconds: float
    #: where torchrun's per-rank logs were written (relative to the course root when inside it)
    log_dir: str
    #: the command that was run (``sys.executable`` shortened to ``python``)
    command: list[str] = field(default_factory=list)
    #: True when the job was stopped because it ran past its timeout
    timed_out: bool = False
    #: the process ids the launcher saw (torchrun and its ranks); none of them is alive afterwards
    pids: list[int] = field(default_factory=list)

    def rank_lines(self, rank: int) -> list[str]:
        """The lines printed by global rank ``rank`` (prefix removed), across all attempts."""
        lines = []
        for line in self.output.splitlines():
            match = _PREFIX.match(line)
            if match and int(match.group(1)) == rank:
                lines.append(match.group(2))
        return lines

    def failures(self) -> list[RankFailure]:
        """Every rank error of every attempt, sorted by attempt, then by time (root cause first)."""
        return rank_failures(self.log_dir, failed=self.returncode != 0)

    @property
    def restarts(self) -> int:
        """How many times torchrun restarted the group (the highest attempt number in the logs)."""
        root = ROOT / self.log_dir if not Path(self.log_dir).is_absolute() else Path(self.log_dir)
        numbers = [int(p.name.split("_", 1)[1]) for p in root.glob("*/attempt_*") if p.name.split("_", 1)[1].isdigit()]
        return max(numbers, default=0)


class DistributedRunError(RuntimeError):
    """A launched job failed or timed out.

    ``.result`` holds the :class:`RunResult`; ``str()`` names the failing
    rank(s) and includes that rank's traceback (from torchrun's error file
    written by ``torch.distributed.elastic.multiprocessing.errors.record``, or
    from the rank's log).
    """

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result

    @property
    def failures(self) -> list[RankFailure]:
        """The rank errors of the last attempt that had any, root cause first (empty if none was recorded)."""
        every = self.result.failures()
        if not every:
            return []
        last = every[-1].attempt
        return [f for f in every if f.attempt == last]

    @property
    def ranks(self) -> list[int]:
        """The global ranks that failed in the last failing attempt, root cause (first to fail) first."""
        return [f.rank for f in self.failures]

    @property
    def root_cause(self) -> RankFailure | None:
        """The first rank to fail in the last failing attempt; the others usually failed because of it."""
        failures = self.failures
        return failures[0] if failures else None


# --------------------------------------------------------------------------
# /proc: the process tree
# --------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """``{pid: (ppid, pgid, start_time)}`` for every process visible in /proc (Linux); {} elsewhere."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
        try:
            # fields[0] is the state; ppid, pgrp, ... ; starttime is field 22 of stat (index 19 here)
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
        except (IndexError, ValueError):
            continue
    return table


def _descendants(root: int, table: dict[int, tuple[int, int, int]]) -> dict[int, int]:
    """``{pid: start_time}`` of ``root`` and everything below it in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _pgid, _start) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in found:
            found[pid] = table[pid][2]
            todo.extend(children.get(pid, []))
    return found


def _alive(pid: int, start: int) -> bool:
    """True if the process ``pid`` exists and is the one that started at ``start`` (not a reused pid)."""
    entry = _proc_table_one(pid)
    return entry is not None and entry[2] == start


def _proc_table_one(pid: int) -> tuple[int, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited; its parent just has not reaped it yet
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _kill_seen(seen: dict[int, int], sig: int) -> None:
    for pid, start in seen.items():
        if _alive(pid, start):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


# --------------------------------------------------------------------------
# Errors from the logs
# --------------------------------------------------------------------------


def _tidy(text: str) -> str:
    """``text`` with the course root removed from paths, so it can be shown in a notebook."""
    root = str(ROOT)
    return text.replace(root + os.sep, "").replace(root, ".")


@dataclass(frozen=True)
class RankFailure:
    """One rank's recorded error in one attempt (attempt 0 is the first start, 1 the first restart, ...)."""

    rank: int
    attempt: int
    #: the Python traceback (paths relative to the course root)
    traceback: str
    #: when the error happened (``time.time()`` seconds): the ``failed_at`` time stamp that
    #: :mod:`helpers.distributed.common` writes, else the error file's modification time;
    #: the earliest in an attempt is the root cause
    time: float

    @property
    def last_line(self) -> str:
        """The exception line, e.g. ``ValueError: shard 1 is corrupt``."""
        lines = [line for line in self.traceback.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


def rank_failures(log_dir: str | os.PathLike, failed: bool = False) -> list[RankFailure]:
    """Every rank error recorded under ``log_dir``, sorted by attempt, then by time (root cause first).

    The traceback comes from the rank's ``error.json`` (written by
    ``torch.distributed.elastic.multiprocessing.errors.record``), or, where a
    rank has none, from the last Python traceback in its ``stderr.log`` (or,
    with ``failed=True``, meaning the job is known to have failed, from the
    last lines of a non-empty ``stderr.log`` without a traceback). On one
    node (what :func:`torchrun` runs) the local rank in the log folder names is
    the global rank.
    """
    root = Path(log_dir)
    if not root.is_absolute():
        root = ROOT / root
    found: list[RankFailure] = []
    for attempt_dir in root.glob("*/attempt_*"):
        try:
            attempt = int(attempt_dir.name.split("_", 1)[1])
        except ValueError:
            continue
        for rank_dir in attempt_dir.iterdir():
            if not (rank_dir.is_dir() and rank_dir.name.isdigit()):
                continue
            error, text, when = rank_dir / "error.json", "", 0.0
            if error.is_file():
                try:
                    data = json.loads(error.read_text(encoding="utf-8"))
                    message = data.get("message", data)
                    if isinstance(message, dict):
                        text = message.get("extraInfo", {}).get("py_callstack") or message.get("message", "")
                    else:
                        text = str(message)
                    when = error.stat().st_mtime
                except (OSError, ValueError, AttributeError):
                    text = ""
            if not text:
                log = rank_dir / "stderr.log"
                if log.is_file() and log.stat().st_size:
                    content = log.read_text(encoding="utf-8", errors="replace")
                    start = content.rfind("Traceback (most recent call last)")
                    if start >= 0:
                        text, when = content[start:], log.stat().st_mtime
                    elif failed:  # e.g. "No module named ...": the rank died before Python could raise
                        text, when = "\n".join(content.strip().splitlines()[-20:]), log.stat().st_mtime
            marker = rank_dir / "failed_at"  # written by helpers.distributed.common when the error happened
            if text and marker.is_file():
                try:
                    when = float(marker.read_text(encoding="utf-8").strip())
                except (OSError, ValueError):
                    pass
            if text:
                found.append(RankFailure(int(rank_dir.name), attempt, _tidy(text.strip()), when))
    return sorted(found, key=lambda f: (f.attempt, f.time, f.rank))


# --------------------------------------------------------------------------
# The launcher
# --------------------------------------------------------------------------


def _short_name(module: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", module.rsplit(".", 1)[-1]) or "job"


def prune_log_dirs(base: Path, keep: int = KEEP_LOG_DIRS, min_age_s: float = PRUNE_MIN_AGE_S) -> list[Path]:
    """Delete all but the newest ``keep`` job folders directly under ``base``; return what was deleted.

    A folder changed less than ``min_age_s`` seconds ago is always kept (another
    notebook's job may be writing to it). Errors (a folder deleted meanwhile) are ignored.
    """
    try:
        folders = [p for p in base.iterdir() if p.is_dir()]
        dated = sorted(((p.stat().st_mtime, p) for p in folders), reverse=True)
    except OSError:
        return []
    now, removed = time.time(), []
    for mtime, path in dated[max(keep, 0):]:
        if now - mtime >= min_age_s:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _unique_log_dir(short: str, port: int) -> Path:
    base = build_dir() / "distributed" / short
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = base / f"{stamp}-{os.getpid()}-{port}"
    path.mkdir(parents=True, exist_ok=False)
    prune_log_dirs(base)
    return path


def torchrun(
    module: str,
    *args: str,
    nproc: int = 2,
    max_restarts: int = 0,
    timeout: float = 300.0,
    threads_per_rank: int = 1,
    env: dict[str, str] | None = None,
    check: bool = True,
    grace: float = 5.0,
    echo: bool = False,
    monitor_interval: float = 0.2,
) -> RunResult:
    """Run ``python -m module args`` on ``nproc`` local ranks under torchrun, and wait for it.

    The command is ``python -m torch.distributed.run --nnodes 1 --nproc-per-node
    nproc --max-restarts max_restarts --rdzv-backend c10d --rdzv-endpoint
    127.0.0.1:<free_port()> --rdzv-id <unique> --log-dir <build/distributed/...>
    --tee 3 --log-line-prefix-template "[rank ${rank}] " -m module args``, run from the
    course root with ``OMP_NUM_THREADS=threads_per_rank``, ``PYTHONUNBUFFERED=1`` and
    the course root on ``PYTHONPATH`` (everything else, e.g. ``COURSE_DATA_MIRROR``,
    is inherited).

    Args:
        module: an importable module with a ``__main__`` block, e.g. ``"helpers.distributed.collectives"``.
        *args: its command-line arguments (strings).
        nproc: ranks to start on this machine.
        max_restarts: how many times torchrun may restart the whole group after a rank fails.
        timeout: seconds before the job is stopped (SIGTERM, then SIGKILL after ``grace``)
            and :class:`DistributedRunError` is raised.
        threads_per_rank: ``OMP_NUM_THREADS`` for each rank.
        env: extra environment variables for torchrun and the ranks.
        check: raise :class:`DistributedRunError` on a non-zero exit code.
        grace: seconds between SIGTERM and SIGKILL on a timeout.
        echo: also print each line as it arrives (handy in a terminal).
        monitor_interval: torchrun's ``--monitor-interval`` (how often it checks its ranks).

    Returns:
        A :class:`RunResult`.

    Raises:
        DistributedRunError: on a timeout, or a non-zero exit code with ``check=True``.
        ValueError: ``nproc`` < 1, ``max_restarts`` < 0 or ``timeout`` <= 0.
    """
    if nproc < 1 or max_restarts < 0 or timeout <= 0 or threads_per_rank < 1:
        raise ValueError(
            f"need nproc >= 1, max_restarts >= 0, timeout > 0, threads_per_rank >= 1; got {nproc=}, {max_restarts=}, {timeout=}, {threads_per_rank=}"
        )
    port = free_port()
    short = _short_name(module)
    log_dir = _unique_log_dir(short, port)
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1",
        "--nproc-per-node", str(nproc),
        "--max-restarts", str(max_restarts),
        "--monitor-interval", str(monitor_interval),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--rdzv-id", f"{short}-{port}",
        "--log-dir", str(log_dir),
        "--tee", "3",
        "--log-line-prefix-template", "[rank ${rank}] ",
        "-m", module, *map(str, args),
    ]  # fmt: skip
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["OMP_NUM_THREADS"] = str(threads_per_rank)
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [child_env.get("PYTHONPATH", "")])])

    lines: list[str] = []
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
        start_new_session=True,
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(_tidy(line.rstrip("\n")))
            if echo:
                print(line, end="", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    seen: dict[int, int] = {}
    own = _proc_table_one(proc.pid)
    if own is not None:
        seen[proc.pid] = own[2]
    timed_out = False
    deadline = start + timeout
    waiting = None
    try:
        waiting = elapsed_bar(f"{module} on {nproc} ranks")
        while proc.poll() is None:
            seen.update(_descendants(proc.pid, _proc_table()))
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.1)
            waiting.update(0.1)
    finally:
        if waiting is not None:
            waiting.close()
        if proc.poll() is None:  # timed out, or interrupted (Ctrl-C in the notebook)
            seen.update(_descendants(proc.pid, _proc_table()))
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # torchrun forwards it to its ranks
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            _kill_seen(seen, signal.SIGKILL)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        # Ranks live in sessions of their own; make sure none outlived torchrun.
        stragglers = {pid: st for pid, st in seen.items() if pid != proc.pid and _alive(pid, st)}
        if stragglers:
            _kill_seen(stragglers, signal.SIGTERM)
            end = time.monotonic() + grace
            while time.monotonic() < end and any(_alive(p, s) for p, s in stragglers.items()):
                time.sleep(0.05)
            _kill_seen(stragglers, signal.SIGKILL)
        reader.join(timeout=5.0)

    seconds = time.monotonic() - start
    shown = ["python" if part == sys.executable else part for part in command]
    result = RunResult(
        returncode=proc.returncode,
        output="\n".join(lines),
        seconds=seconds,
        log_dir=rel(log_dir),
        command=shown,
        timed_out=timed_out,
        pids=sorted(seen),
    )
    if timed_out:
        raise DistributedRunError(_describe(result, f"{module} timed out after {timeout:.0f} s and was stopped"), result)
    if check and proc.returncode != 0:
        raise DistributedRunError(_describe(result, f"{module} failed with exit code {proc.returncode}"), result)
    return result


def _describe(result: RunResult, headline: str, max_lines: int = 30) -> str:
    every = result.failures()
    if not every:
        tail = "\n".join(result.output.splitlines()[-max_lines:])
        return f"{headline}; no rank recorded an error. Last lines of output:\n{tail}\n(logs: {result.log_dir})"
    last = [f for f in every if f.attempt == every[-1].attempt]
    root, others = last[0], last[1:]
    names = f"rank {root.rank} failed first" + (f", then rank(s) {', '.join(str(f.rank) for f in others)}" if others else "")
    trace_lines = root.traceback.splitlines()
    if len(trace_lines) > max_lines:
        trace_lines = ["...", *trace_lines[-max_lines:]]
    parts = [f"{headline}: {names} (attempt {root.attempt}).", f"Traceback of rank {root.rank}:", *trace_lines]
    parts += [f"rank {f.rank}: {f.last_line}" for f in others]
    parts.append(f"(logs: {result.log_dir})")
    return "\n".join(parts)
