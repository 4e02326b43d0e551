"""Serve exported MNIST models from a fresh process: chapter 22's deployment check.

Run as a *script*, not as part of the course package, so that the process never
imports the course's code (no ``helpers``, no model class, no training loop)::

    python -I helpers/serve_exported.py --pt2 build/22_export/mlp.pt2 \\
        --onnx build/22_export/mlp.onnx [--aoti build/22_export/mlp_aoti.pt2] < requests.jsonl

``-I`` (isolated mode) also keeps the script's own folder and ``PYTHONPATH`` off
``sys.path``: only installed packages (torch, onnxruntime, numpy) can be imported.

Protocol (JSON lines on stdin and stdout):

- each input line is a request ``{"id": <any>, "images": [[...784 floats...], ...]}``,
  a batch of B normalised MNIST images (float32 values, the preprocessing of
  chapter 05), shape ``[B, 784]`` or ``[B, 1, 28, 28]``;
- the first output line describes the server: ``{"ready": true, "load_s": {runtime:
  seconds}, "threads": int, "course_modules": [names of imported modules from the
  course, expected empty]}``;
- then one line per request: ``{"id": ..., "logits": {runtime: [[10 floats] * B]},
  "predictions": {runtime: [B ints]}}``, with the logits as exact float32 values.

Every runtime given answers every request. Errors go to stderr and the exit status
is non-zero. The caller (the notebook) compares the answers with its own model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def load_runtimes(pt2: str | None, onnx: str | None, aoti: str | None, threads: int) -> tuple[dict, dict]:
    """Load each artefact that was given.

    Args:
        pt2: path of a ``torch.export.save`` archive, or None.
        onnx: path of an ONNX file with input ``images`` and output ``logits``, or None.
        aoti: path of an AOTInductor package (``aoti_compile_and_package``), or None.
        threads: intra-op threads for torch and onnxruntime.

    Returns:
        ``(runtimes, load_s)``: runtime name -> callable taking a float32 numpy array
        ``[B, 1, 28, 28]`` and returning float32 logits ``[B, 10]``; and runtime name ->
        seconds its loading took.
    """
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    runtimes, load_s = {}, {}
    if pt2:
        start = time.perf_counter()
        program = torch.export.load(pt2).module()
        load_s["torch.export .pt2"] = time.perf_counter() - start

        def run_pt2(x, program=program):
            with torch.no_grad():
                return program(torch.from_numpy(x)).numpy()

        runtimes["torch.export .pt2"] = run_pt2
    if aoti:
        start = time.perf_counter()
        runner = torch._inductor.aoti_load_package(aoti)
        load_s["AOTInductor .pt2"] = time.perf_counter() - start

        def run_aoti(x, runner=runner):
            with torch.no_grad():
                return runner(torch.from_numpy(x)).numpy()

        runtimes["AOTInductor .pt2"] = run_aoti
    if onnx:
        import onnxruntime

        start = time.perf_counter()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
        load_s["onnxruntime .onnx"] = time.perf_counter() - start

        def run_onnx(x, session=session):
            return session.run(["logits"], {"images": x})[0]

        runtimes["onnxruntime .onnx"] = run_onnx
    for run in runtimes.values():  # one warm-up call each, as a server does before taking traffic
        np.asarray(run(np.zeros((1, 1, 28, 28), dtype=np.float32)))
    return runtimes, load_s


def main(argv: list[str] | None = None) -> int:
    """Load the artefacts, announce readiness, answer every request on stdin; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pt2", help="torch.export .pt2 archive")
    parser.add_argument("--onnx", help="ONNX file (input 'images', output 'logits')")
    parser.add_argument("--aoti", help="AOTInductor .pt2 package")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    args = parser.parse_args(argv)
    if not (args.pt2 or args.onnx or args.aoti):
        parser.error("give at least one of --pt2, --onnx, --aoti")

    import numpy as np

    runtimes, load_s = load_runtimes(args.pt2, args.onnx, args.aoti, args.threads)
    course = sorted(m for m in sys.modules if m.split(".")[0] in {"helpers", "notebooks", "tests"})
    print(json.dumps({"ready": True, "load_s": load_s, "threads": args.threads, "course_modules": course}), flush=True)
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
    sys.exit(main())
