"""A chapter run through JupyterLab's own interface, in headless Chromium, as a learner would run it.

Starts JupyterLab from the course's venv on a free port, in a temporary
folder laid out like ``notebooks/`` with a copy of one chapter and its
jupytext source in ``src/`` (Lab autosaves; the repository's copy stays
untouched), opens it in Chromium driven by Selenium, runs every cell with
Lab's "Run All Cells" command, and checks what the learner would see: one
file-browser entry for the chapter (the source is inside ``src/``), the
kernel's name, every code cell executed, no error output, the figures drawn,
and an exercise's "not attempted yet" verdict; that Lab's news prompt is off
(``jupyter/overrides.json``, installed by ``make setup``); and that saving
writes the code back to the paired source in ``src/`` (jupytext). On failure
a screenshot is kept under ``build/browser/``.

Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium``
(``tests/browser_support.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from helpers.paths import JUPYTEXT_FORMATS, build_dir, chapter_notebook, chapter_source

from .browser_support import chromium, require_browser

STEM = "04_linear_regression"
KERNEL_DISPLAY_NAME = "PyTorch course (.venv)"
RUN_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a copy of the chapter: yields (base URL with token, notebook file name)."""
    require_browser()
    folder = tmp_path / "lab"
    folder.mkdir()
    nb = nbformat.read(chapter_notebook(STEM), as_version=4)
    for cell in nb.cells:  # as a learner gets it after "Clear All Outputs": nothing has run yet
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, folder / f"{STEM}.ipynb")
    (folder / "src").mkdir()
    shutil.copy(chapter_source(STEM), folder / "src")  # after the notebook: jupytext prefers a newer source
    token, port = secrets.token_hex(16), _free_port()
    env = {**os.environ, "COURSE_BUILD_DIR": str(tmp_path / "build"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}", "--LabApp.expose_app_in_browser=True",
         *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI containers often run as root
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"JupyterLab exited with {proc.returncode}: {(tmp_path / 'lab.log').read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not listen on port {port} within 60 s: "
                                f"{(tmp_path / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield base, token, f"{STEM}.ipynb", folder
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# JavaScript run in the page: the state of every cell of the open notebook, read from Lab's own model.
_CELLS_JS = """
const panel = window.jupyterapp.shell.currentWidget;
if (!panel || !panel.content || !panel.sessionContext) { return null; }
const cells = [];
for (const cell of panel.content.widgets) {
  const m = cell.model;
  if (m.type !== 'code') { continue; }
  const outputs = [];
  for (let i = 0; i < m.outputs.length; i++) { outputs.push(m.outputs.get(i).toJSON()); }
  cells.push({count: m.executionCount, outputs: outputs});
}
const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
return {kernel: panel.sessionContext.kernelDisplayName, status: kernel ? kernel.status : 'none', cells: cells};
"""


@pytest.mark.slow
def test_a_chapter_runs_all_cells_in_jupyterlab(lab):
    base, token, name, folder = lab
    driver = chromium()
    shots = build_dir() / "browser"
    start = time.monotonic()
    try:
        settings = json.load(urllib.request.urlopen(
            f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}", timeout=30))
        news = settings["schema"]["properties"]["fetchNews"]["default"]  # overrides.json changes the defaults
        assert news == "false", f"fetchNews is {news!r}: the news prompt is on; make setup installs jupyter/overrides.json"
        listing = json.load(urllib.request.urlopen(f"{base}/api/contents/?token={token}", timeout=30))
        entries = sorted(item["name"] for item in listing["content"])
        assert entries == sorted([name, "src"]), f"the file browser should list the chapter once and src/: {entries}"
        driver.get(f"{base}/lab/tree/{name}?token={token}")
        state = _wait(driver, lambda s: s and s["kernel"] == KERNEL_DISPLAY_NAME and s["status"] == "idle", 90,
                      "the notebook to open with an idle course kernel")
        driver.execute_script("return window.jupyterapp.commands.execute('notebook:run-all-cells');")
        # Done when every cell has run, or when the kernel is idle with an error shown (Run All stops there).
        state = _wait(driver, lambda s: s and s["status"] == "idle" and (
            all(c["count"] for c in s["cells"]) or any(o["output_type"] == "error" for c in s["cells"] for o in c["outputs"])),
            RUN_TIMEOUT_S, "every code cell to run")
        assert state["kernel"] == KERNEL_DISPLAY_NAME
        outputs = [o for c in state["cells"] for o in c["outputs"]]
        errors = [o for o in outputs if o["output_type"] == "error"]
        assert not errors, f"error outputs: {[(e['ename'], e['evalue']) for e in errors]}"
        assert all(c["count"] for c in state["cells"]), "some code cells did not run"
        stderr = [o["text"] for o in outputs if o["output_type"] == "stream" and o.get("name") == "stderr"]
        assert not stderr, f"stderr in the outputs: {stderr}"
        images = driver.execute_script(
            "return Array.from(document.querySelectorAll('.jp-RenderedImage img'))"
            ".filter(i => i.complete && i.naturalWidth > 100).length;")
        assert images >= 2, f"{images} figures rendered"
        text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
        assert "not attempted yet" in text, "no exercise showed its 'not attempted yet' verdict"
        source = folder / "src" / f"{STEM}.py"
        before = source.stat().st_mtime_ns
        driver.execute_script("return window.jupyterapp.commands.execute('docmanager:save');")
        deadline = time.monotonic() + 30
        while source.stat().st_mtime_ns == before and time.monotonic() < deadline:
            time.sleep(0.3)
        assert source.stat().st_mtime_ns != before, "saving the notebook did not rewrite its source in src/ (jupytext pairing)"
        saved = nbformat.read(folder / name, as_version=4)
        assert saved.metadata["jupytext"]["formats"] == JUPYTEXT_FORMATS, saved.metadata.get("jupytext")
        print(f"JupyterLab ran {len(state['cells'])} code cells of {name} with {images} figures "
              f"in {time.monotonic() - start:.0f} s")
    except BaseException:
        shots.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(shots / f"{Path(name).stem}.png"))
        raise
    finally:
        driver.quit()


def _wait(driver, ready, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    state = None
    while time.monotonic() < deadline:
        try:
            state = driver.execute_script(_CELLS_JS)
        except Exception:  # the page is still loading: window.jupyterapp not there yet
            state = None
        if ready(state):
            return state
        time.sleep(0.5)
    summary = None if state is None else {"kernel": state["kernel"], "status": state["status"],
                                          "unrun": sum(not c["count"] for c in state["cells"])}
    raise AssertionError(f"waited {timeout_s:.0f} s for {what}; last state {summary}")
