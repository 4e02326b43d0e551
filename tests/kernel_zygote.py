"""Test kernels forked from a warm parent (a "zygote"), so each one skips the big imports.

Every notebook test starts a Jupyter kernel, and a fresh kernel spends 3-8 s
of CPU on its imports before its first cell does anything: ``import torch``
about 2 s on the 2-core CI machine, torchvision another 3-5 s (it imports
``torch._dynamo``, and with it sympy), matplotlib and ipykernel most of a
second. The suite starts about 55 kernels. The zygote imports those modules
once per pytest worker and then, for each kernel, forks: the child sets the
environment, working directory and standard streams the kernel manager asked
for, starts its own session (so signals to its process group reach it and its
children), and runs ``ipykernel_launcher`` with the given arguments. The
modules are shared copy-on-write, and the kernel starts in well under a second.

Only the suite uses it (``conftest.py`` routes ipykernel launches of this
virtual environment's Python through it); ``make run``, ``make notebooks`` and
JupyterLab start ordinary kernels, and the stored outputs come from those.
``COURSE_TEST_ZYGOTE=0`` turns it off. It refuses to fork, and the kernel
starts the ordinary way, if the parent has more than one thread: an OpenMP
pool or any other thread does not survive a ``fork``.

Protocol, over a Unix socket: the client sends one JSON line
``{"argv": [...], "env": {...}, "cwd": "..."}`` with three file descriptors
(stdin, stdout, stderr) attached; the zygote answers ``{"pid": N}`` and, when
that child exits, ``{"exit": code}`` (a negative code: killed by that signal),
then closes the connection. A connection closed early kills the child's
process group. The zygote exits when the worker that started it does.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

#: What the zygote imports before it forks: what nearly every chapter imports at its start. Not Inductor's
#: compile_fx: importing it here saves a kernel 1.6 s of imports, but chapter 23's nbval run then took
#: 122 and 126 s against 116 and 108 s without it (measured twice each, alternating).
WARM_MODULES = ("torch", "torchvision", "numpy", "matplotlib", "matplotlib.pyplot")


def _threads() -> int:
    """OS threads of this process (OpenMP's and the like count too, unlike threading.active_count())."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _send_line(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _child(conn: socket.socket, request: dict, fds: list[int], server: socket.socket, others) -> None:
    """In the forked child: become the kernel. Never returns."""
    code = 1
    try:
        server.close()
        for other in others:
            other.close()
        conn.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import random
        import runpy

        import numpy

        random.seed()  # each kernel its own unseeded streams, as a fresh process would have
        numpy.random.seed()
        sys.argv = ["ipykernel_launcher", *request["argv"]]
        sys.path[0] = request["cwd"]  # what `python -m` puts first
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must not return into the zygote's loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> None:
    """The zygote: import :data:`WARM_MODULES`, then fork a kernel per request until the parent exits."""
    parent = os.getppid()
    # matplotlib fixes its backend from MPLBACKEND when it is imported; a kernel's is the one ipykernel's
    # init_gui_pylab puts there unless it is set already (this zygote's environment is never a kernel's).
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in WARM_MODULES:
        __import__(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    ready = _threads() == 1
    print(json.dumps({"ready": ready, "threads": _threads()}), flush=True)
    if not ready:
        return
    children: dict[int, socket.socket] = {}  # pid -> the connection that asked for it
    while os.getppid() == parent:
        readable, _, _ = select.select([server, *children.values()], [], [], 0.05)
        for sock in readable:
            if sock is server:
                conn, _ = server.accept()
                line, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                while not line.endswith(b"\n"):  # a long environment can arrive in pieces
                    more = conn.recv(1 << 20)
                    if not more:
                        break
                    line += more
                request = json.loads(line.decode())
                pid = os.fork()
                if pid == 0:
                    _child(conn, request, fds, server, list(children.values()))
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                _send_line(conn, {"pid": pid})
            else:  # a client went away before its kernel exited: stop the kernel
                _kill(next(p for p, c in children.items() if c is sock))
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    _send_line(conn, {"exit": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()
    for pid in children:  # the worker is gone: so are its kernels
        _kill(pid)


def _kill(pid: int) -> None:
    """SIGKILL a forked kernel and its process group (it may not have called setsid yet)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


class ForkedKernel:
    """A kernel the zygote forked, with the part of ``subprocess.Popen`` that jupyter_client uses."""

    stdin = stdout = stderr = None

    def __init__(self, conn: socket.socket, pid: int, args: list[str]):
        self._conn, self.pid, self.args = conn, pid, args
        self.returncode: int | None = None
        self._buffer = b""

    def _read(self, timeout: float | None) -> None:
        while self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                return
            chunk = self._conn.recv(4096)
            if not chunk:  # the zygote is gone; it killed its children on the way out
                self.returncode = -signal.SIGKILL
                break
            self._buffer += chunk
            if b"\n" in self._buffer:
                self.returncode = int(json.loads(self._buffer.split(b"\n", 1)[0])["exit"])
        self._conn.close()

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # never signal a pid that may have been reused
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """A zygote process of this pytest worker, started on first use; :meth:`launch` forks a kernel from it."""

    def __init__(self, env: dict[str, str]):
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="course-zygote-")  # a short path: a socket's is limited to 107 bytes
        self.path = os.path.join(self.folder, "zygote.sock")
        self.process = subprocess.Popen(
            [sys.executable, "-Xfrozen_modules=off", "-m", "tests.kernel_zygote", self.path],
            stdout=subprocess.PIPE, cwd=str(Path(__file__).parents[1]), env=env, start_new_session=True,
        )
        status = json.loads(self.process.stdout.readline() or b'{"ready": false}')
        self.ready = bool(status.get("ready"))
        if not self.ready:
            self.process.wait(timeout=30)

    def launch(self, argv: list[str], env: dict[str, str], cwd: str, stdin=None, stdout=None, stderr=None) -> ForkedKernel:
        """Fork a kernel running ``ipykernel_launcher`` with ``argv`` (the arguments after the module name)."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        with open(os.devnull, "rb") as devnull:
            fds = [_fileno(stdin, devnull), _fileno(stdout, sys.__stdout__), _fileno(stderr, sys.__stderr__)]
            socket.send_fds(conn, [(json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n").encode()], fds)
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                raise RuntimeError("the kernel zygote closed the connection before it forked")
            line += chunk
        return ForkedKernel(conn, int(json.loads(line)["pid"]), argv)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.rmdir(self.folder)


def _fileno(stream, default) -> int:
    """A file descriptor for one of the kernel's standard streams (a file object, a descriptor, or None)."""
    if stream is None or stream == subprocess.PIPE:
        stream = default
    return stream if isinstance(stream, int) else stream.fileno()


_zygote: Zygote | None = None
_failed = False


def _ipykernel_argv(cmd: list[str]) -> list[str] | None:
    """The arguments after ``-m ipykernel_launcher`` when ``cmd`` starts a kernel of this Python, else None."""
    if len(cmd) < 3 or os.path.abspath(cmd[0]) != os.path.abspath(sys.executable):
        return None
    try:
        at = cmd.index("-m")
    except ValueError:
        return None
    if cmd[at + 1 : at + 2] != ["ipykernel_launcher"] or not set(cmd[1:at]) <= {"-Xfrozen_modules=off"}:
        return None
    return cmd[at + 2 :]


def install() -> None:
    """Route this process's launches of ipykernel kernels of this Python through a zygote (see the module text).

    It replaces ``LocalProvisioner.launch_kernel`` of jupyter_client, which both nbval and papermill start
    their kernels with. Any other command, and every launch once the zygote has failed, goes the ordinary way.
    """
    if os.environ.get("COURSE_TEST_ZYGOTE", "1") == "0" or not sys.platform.startswith("linux"):
        return
    import atexit
    import pathlib

    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    env = dict(os.environ)  # the session's environment, before any test changes it
    ordinary = LocalProvisioner.launch_kernel

    async def launch_kernel(self, cmd, **kwargs):
        global _zygote, _failed
        argv = _ipykernel_argv(cmd)
        if argv is None or _failed:
            return await ordinary(self, cmd, **kwargs)
        try:
            if _zygote is None:
                _zygote = Zygote(env)
                atexit.register(_zygote.close)
            if not _zygote.ready:
                raise RuntimeError("the zygote has more than one thread after its imports")
            kernel_env = {**(kwargs.get("env") or os.environ), "JPY_PARENT_PID": str(os.getpid())}  # as launch_kernel sets it
            process = _zygote.launch(argv, env=kernel_env, cwd=str(kwargs.get("cwd") or os.getcwd()),
                                     stdin=kwargs.get("stdin"), stdout=kwargs.get("stdout"), stderr=kwargs.get("stderr"))
        except (OSError, RuntimeError, ValueError) as error:
            _failed = True
            print(f"kernel zygote unavailable ({error}); kernels start the ordinary way", file=sys.stderr)
            return await ordinary(self, cmd, **kwargs)
        self.process, self.pid, self.pgid = process, process.pid, process.pid
        self.cwd = kwargs.get("cwd", pathlib.Path.cwd())
        return self.connection_info

    LocalProvisioner.launch_kernel = launch_kernel


if __name__ == "__main__":
    serve(sys.argv[1])
