"""Every PyTorch name the chapters' code uses exists in the installed torch.

GPU branches do not run on a CPU-only CI machine, so a misspelt or removed name there (such as
``self_cuda_memory_usage``, which the averaged profiler events of torch 2.14 no longer have) would only
show on a learner's GPU. These tests read the code cells of every chapter and check, against the
installed torch:

- every dotted name that starts at ``torch`` (``torch.cuda.max_memory_allocated``, ...) resolves;
- every profiler-event field named in the code (``self_device_time_total``, ``self_cpu_memory_usage``, ...)
  is an attribute of the averaged events that ``prof.key_averages()`` returns.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import jupytext
import pytest
import torch
from torch.autograd.profiler_util import FunctionEventAvg

from helpers.authoring import sources

NOTEBOOKS = sources()


def _registered_at_run_time(dotted: str) -> bool:
    """Custom operators (``torch.ops.<namespace>.<op>``) exist only once the chapter has registered them."""
    parts = dotted.split(".")
    return len(parts) > 3 and parts[1] == "ops" and parts[2] not in ("aten", "prims", "quantized")

_PROFILER_FIELD = re.compile(r"\b((?:self_)?(?:cpu|cuda|device|xpu|mps|privateuse1)_(?:time_total|memory_usage))\b")


def _code(notebook: Path) -> str:
    cells = jupytext.read(notebook).cells
    lines = []
    for cell in cells:
        if cell.cell_type == "code":
            # IPython magics and shell escapes are not Python.
            lines += [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def _torch_names(code: str) -> set[str]:
    """Dotted names ``torch.a.b`` read in the code (attribute chains rooted at the name ``torch``)."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute):
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "torch":
                names.add(".".join(["torch", *reversed(parts)]))
    return names


def _resolves(dotted: str) -> bool:
    obj = torch
    parts = dotted.split(".")[1:]
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:  # a submodule that is not imported by `import torch`
                obj = importlib.import_module(".".join(["torch", *parts[: i + 1]]))
            except ImportError:
                return False
    return True


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_torch_name_in_the_code_exists(notebook):
    missing = sorted(n for n in _torch_names(_code(notebook)) if not _registered_at_run_time(n) and not _resolves(n))
    assert not missing, f"{notebook.name} uses names that torch {torch.__version__} does not have: {missing}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_profiler_field_in_the_code_exists(notebook):
    event = FunctionEventAvg()
    fields = set(_PROFILER_FIELD.findall(_code(notebook)))
    missing = sorted(f for f in fields if not hasattr(event, f))
    assert not missing, (
        f"{notebook.name} reads profiler fields that torch {torch.__version__} does not have: {missing}; "
        "use the device-generic names (self_device_time_total, self_device_memory_usage)"
    )


def test_the_name_checks_can_fail():
    assert not _resolves("torch.cuda.no_such_function")
    assert _resolves("torch.cuda.max_memory_allocated") and _resolves("torch.utils.checkpoint.checkpoint")
    assert _torch_names("x = torch.cuda.memory_allocated(0)\ny = torch.nn.functional.relu") == {
        "torch.cuda.memory_allocated", "torch.cuda", "torch.nn.functional.relu", "torch.nn.functional", "torch.nn"}
    assert not hasattr(FunctionEventAvg(), "self_cuda_memory_usage")
