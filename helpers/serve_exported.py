"""Serve exported MNIST models from a fresh process: chapter 22's deployment check.

Run as a *script*, not as part of the course package, so that the process never
imports the course's code (no ``helpers``, no model class, no training loop)::

    python -I helpers/serve_exported.py --pt2 build/22_export/mlp.pt2 \\
        --onnx build/22_export/mlp.onnx [--aoti build/22_export/mlp_aoti.pt2] < requests.jsonl

``-I`` (isolated mode) keeps the script's own folder and ``PYTHONPATH`` off
``sys.path``, but that is not enough on its own: the course package is an
editable install, so ``import helpers`` would still work. Run as a script, the
server therefore first *blocks* the course's packages (``sys.modules[name] =
None``, which makes any later ``import helpers`` raise ``ImportError``), then
loads the artefacts. A file that needed the course's code to load or run would
fail here.

Protocol (JSON lines on stdin and stdout):

- each input line is a request ``{"id": <any>, "images": [[...784 floats...], ...]}``,
  a batch of B normalised MNIST images (float32 values, the preprocessing of
  chapter 05), shape ``[B, 784]`` or ``[B, 1, 28, 28]``;
- the first output line describes the server: ``{"ready": true, "load_s": {runtime:
  seconds of the first load}, "reload_s": {runtime: seconds of a second load of the
  same file}, "threads": int, "course_modules": [names of imported modules from the
  course, expected empty], "course_importable": {package: whether it could be found
  before it was blocked}, "course_import": {package: the error ``import package`` raises
  after loading, or "imported" when it did not fail}}``. The first load of each kind
  includes the imports torch makes lazily the first time (``torch.export``'s
  deserialiser, the AOTInductor loader); the reload is the file's own cost;
- then one line per request: ``{"id": ..., "logits": {runtime: [[10 floats] * B]},
  "predictions": {runtime: [B ints]}}``, with the logits as exact float32 values.

Every runtime given answers every request. Errors go to stderr and the exit status
is non-zero. The caller (the notebook) compares the answers with its own model.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time

COURSE_PACKAGES = ("helpers", "notebooks", "tests")
"""Top-level names of the course's own code, which the server must neither import nor need."""


def block_course_imports(packages: tuple[str, ...] = COURSE_PACKAGES) -> dict[str, bool]:
    """Make ``import <package>`` fail for each of ``packages``; return whether each was findable first.

    Sets ``sys.modules[package] = None``, Python's documented way to make an import
    raise ``ImportError``. Call it only in a process of its own (the server run as a
    script): it would break the course package in the process that calls it.

    Returns:
        package name -> True when ``importlib.util.find_spec`` found it before blocking
        (an editable install makes ``helpers`` findable even under ``python -I``).
    """
    findable = {}
    for name in packages:
        try:
            findable[name] = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            findable[name] = False
        sys.modules[name] = None  # type: ignore[assignment]
    return findable


def try_imports(packages: tuple[str, ...] = COURSE_PACKAGES) -> dict[str, str]:
    """``import`` each package; return package -> ``"ImportError: ..."`` or ``"imported"``."""
    result = {}
    for name in packages:
        try:
            importlib.import_module(name)
            result[name] = "imported"
        except ImportError as err:
            result[name] = f"{type(err).__name__}: {err}"
    return result


def load_runtimes(pt2: str | None, onnx: str | None, aoti: str | None, threads: int) -> tuple[dict, dict, dict]:
    """Load each artefact that was given, twice (the first load pays torch's lazy imports).

    Args:
        pt2: path of a ``torch.export.save`` archive, or None.
        onnx: path of an ONNX file with input ``images`` and output ``logits``, or None.
        aoti: path of an AOTInductor package (``aoti_compile_and_package``), or None.
        threads: intra-op threads for torch and onnxruntime.

    Returns:
        ``(runtimes, load_s, reload_s)``: runtime name -> callable taking a float32 numpy
        array ``[B, 1, 28, 28]`` and returning float32 logits ``[B, 10]``; runtime name ->
        seconds of its first load; runtime name -> seconds of a second load of the same
        file (the one served).
    """
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    runtimes, load_s, reload_s = {}, {}, {}

    def timed_twice(name, load):
        for seconds in (load_s, reload_s):
            start = time.perf_counter()
            loaded = load()
            seconds[name] = time.perf_counter() - start
        return loaded

    if pt2:
        program = timed_twice("torch.export .pt2", lambda: torch.export.load(pt2).module())

        def run_pt2(x, program=program):
            with torch.no_grad():
                return program(torch.from_numpy(x)).numpy()

        runtimes["torch.export .pt2"] = run_pt2
    if aoti:
        runner = timed_twice("AOTInductor .pt2", lambda: torch._inductor.aoti_load_package(aoti))

        def run_aoti(x, runner=runner):
            with torch.no_grad():
                return runner(torch.from_numpy(x)).numpy()

        runtimes["AOTInductor .pt2"] = run_aoti
    if onnx:
        import onnxruntime

        def open_session():
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            # Idle worker threads sleep instead of spinning, so they do not take the cores from others.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            return onnxruntime.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])

        session = timed_twice("onnxruntime .onnx", open_session)

        def run_onnx(x, session=session):
            return session.run(["logits"], {"images": x})[0]

        runtimes["onnxruntime .onnx"] = run_onnx
    for run in runtimes.values():  # one warm-up call each, as a server does before taking traffic
        np.asarray(run(np.zeros((1, 1, 28, 28), dtype=np.float32)))
    return runtimes, load_s, reload_s


def main(argv: list[str] | None = None, *, importable: dict[str, bool] | None = None) -> int:
    """Load the artefacts, announce readiness, answer every request on stdin; 0 on success.

    ``importable``: what :func:`block_course_imports` returned, when the caller blocked
    the course's packages (the script does, before anything else); reported as is.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pt2", help="torch.export .pt2 archive")
    parser.add_argument("--onnx", help="ONNX file (input 'images', output 'logits')")
    parser.add_argument("--aoti", help="AOTInductor .pt2 package")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    args = parser.parse_args(argv)
    if not (args.pt2 or args.onnx or args.aoti):
        parser.error("give at least one of --pt2, --onnx, --aoti")

    import numpy as np

    runtimes, load_s, reload_s = load_runtimes(args.pt2, args.onnx, args.aoti, args.threads)
    course = sorted(m for m in sys.modules if m.split(".")[0] in COURSE_PACKAGES and sys.modules[m] is not None)
    ready = {"ready": True, "load_s": load_s, "reload_s": reload_s, "threads": args.threads, "course_modules": course,
             "course_importable": importable or {}, "course_import": try_imports() if importable else {}}
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        images = np.asarray(request["images"], dtype=np.float32).reshape(-1, 1, 28, 28)
        logits = {name: np.asarray(run(images), dtype=np.float32) for name, run in runtimes.items()}
        reply = {
            "id": request.get("id"),
            "logits": {name: out.tolist() for name, out in logits.items()},
            "predictions": {name: out.argmax(axis=1).tolist() for name, out in logits.items()},
        }
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    findable = block_course_imports()  # first: nothing below may import, or need, the course's code
    sys.exit(main(importable=findable))
