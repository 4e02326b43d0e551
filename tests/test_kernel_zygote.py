"""tests/kernel_zygote.py: a forked kernel behaves like a started one for what the suite relies on."""

from __future__ import annotations

import os
import sys
import time

import pytest

from . import kernel_zygote

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks: Linux only")


def test_only_this_pythons_ipykernel_launches_are_forked():
    py = sys.executable
    assert kernel_zygote._ipykernel_argv([py, "-m", "ipykernel_launcher", "-f", "c.json"]) == ["-f", "c.json"]
    assert kernel_zygote._ipykernel_argv([py, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "c.json"]) == ["-f", "c.json"]
    assert kernel_zygote._ipykernel_argv(["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "c.json"]) is None
    assert kernel_zygote._ipykernel_argv([py, "-X", "dev", "-m", "ipykernel_launcher"]) is None  # a flag the zygote lacks
    assert kernel_zygote._ipykernel_argv([py, "-m", "other_module"]) is None


def _run(kc, code: str, timeout: float = 60) -> tuple[str, list[str]]:
    """Execute ``code``; return (stdout text, error names)."""
    msg_id = kc.execute(code)
    out, errors = [], []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            out.append(content["text"])
        elif kind == "error":
            errors.append(content["ename"])
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out), errors


@pytest.mark.slow
def test_a_kernel_is_forked_with_its_own_environment_cwd_signals_and_exit(tmp_path, monkeypatch):
    from jupyter_client.manager import start_new_kernel

    if os.environ.get("COURSE_TEST_ZYGOTE", "1") == "0":
        pytest.skip("COURSE_TEST_ZYGOTE=0")
    monkeypatch.setenv("ZYGOTE_PROBE", "from the kernel manager")
    km, kc = start_new_kernel(kernel_name="pytorch-course", cwd=str(tmp_path))
    try:
        assert isinstance(km.provisioner.process, kernel_zygote.ForkedKernel), "the kernel was not forked from the zygote"
        out, errors = _run(kc, "import os, sys, matplotlib; print(os.getcwd(), os.environ['ZYGOTE_PROBE'], 'torch' in sys.modules, "
                               "matplotlib.get_backend(), os.getpid(), sep='|')")
        assert not errors, errors
        cwd, probe, warm, backend, pid = out.strip().split("|")
        assert cwd == str(tmp_path) and probe == "from the kernel manager" and warm == "True", out
        assert backend == "module://matplotlib_inline.backend_inline", f"figures would not show inline: backend {backend}"
        assert int(pid) == km.provisioner.pid != os.getpid()
        # An interrupt reaches the running cell, as it does a started kernel.
        msg_id = kc.execute("import time; time.sleep(60)")
        time.sleep(1.0)
        km.interrupt_kernel()
        deadline = time.monotonic() + 30
        interrupted = False
        while time.monotonic() < deadline and not interrupted:
            msg = kc.get_iopub_msg(timeout=30)
            interrupted = msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "error" and \
                msg["content"]["ename"] == "KeyboardInterrupt"
        assert interrupted, "the interrupt did not reach the forked kernel"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    assert km.provisioner is None or km.provisioner.process is None, "the forked kernel did not exit on shutdown"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)
