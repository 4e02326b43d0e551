"""Recording a chapter's headline figures for ``build/report.md``.

A notebook creates one :class:`ChapterReport` near the top, calls
:meth:`ChapterReport.record` for each figure the chapter claims (accuracy,
speed-up, bytes saved), and :meth:`ChapterReport.finish` in its last cell.
Each call rewrites ``build/figures/<chapter>.json`` atomically, so the
``make run`` driver (:mod:`helpers.runner`) can read what a notebook
measured, and tell a notebook that really finished from one that stopped early.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .paths import atomic_write_text, build_dir

__all__ = ["ChapterReport", "figures_path", "format_figure", "machine_device", "read_figures"]


def format_figure(value: float | int | str, unit: str) -> str:
    """``value`` with its unit, as the report prints it: ``97.8%``, ``3.1x``, ``0.42 s``."""
    return f"{value}{unit}" if unit in ("", "%", "x") else f"{value} {unit}"


def figures_path(chapter: str) -> Path:
    """``build/figures/<chapter>.json`` (honours ``$COURSE_BUILD_DIR``)."""
    return build_dir() / "figures" / f"{chapter}.json"


def _write_json_atomically(path: Path, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2))


def machine_device() -> str:
    """The accelerator this process sees, as a run's stamp names it: ``"cpu"`` when there is none,
    else its type and, for CUDA, the device name (``"cuda (NVIDIA H200)"``)."""
    import torch  # here, not at the top: the runner and the authoring check read reports without torch

    acc = torch.accelerator.current_accelerator(check_available=True)  # None on a CUDA build with no GPU
    if acc is None:
        return "cpu"
    return f"cuda ({torch.cuda.get_device_name()})" if acc.type == "cuda" else acc.type


class ChapterReport:
    """The headline figures of one chapter run.

    Args:
        chapter: the notebook's stem, e.g. ``"05_mlp_mnist"``.

    Creating it starts a fresh record (stale figures from an earlier run are
    dropped) and a wall clock.
    """

    def __init__(self, chapter: str) -> None:
        if not chapter or "/" in chapter:
            raise ValueError(f"chapter must be a notebook stem like '05_mlp_mnist', got {chapter!r}")
        self.chapter = chapter
        self.path = figures_path(chapter)
        self._start = time.perf_counter()
        import torch  # a notebook has imported it already

        self._data = {"chapter": chapter, "figures": {}, "complete": False, "seconds": None,
                      "torch": torch.__version__, "device": machine_device()}
        _write_json_atomically(self.path, self._data)

    def record(self, name: str, value: float | int | str, unit: str = "", digits: int = 4):
        """Store one figure and return ``value`` unchanged.

        Args:
            name: short label, e.g. ``"test accuracy"``.
            value: a number (rounded to ``digits`` significant decimals) or a short string.
            unit: e.g. ``"%"``, ``"s"``, ``"x"``, ``"MB"``.

        Raises:
            TypeError: ``value`` is not a number or string (e.g. a tensor: call ``.item()``).
        """
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"record {name!r}: value must be int, float or str, got {type(value).__name__}; use .item() for tensors")
        stored = round(value, digits) if isinstance(value, float) else value
        self._data["figures"][name] = {"value": stored, "unit": unit}
        _write_json_atomically(self.path, self._data)
        return value

    def finish(self) -> None:
        """Mark the chapter complete (its last cell ran) and print its figures in one line."""
        self._data["complete"] = True
        self._data["seconds"] = round(time.perf_counter() - self._start, 1)
        _write_json_atomically(self.path, self._data)
        print(f"{self!r} finished in {self._data['seconds']} s")

    def __repr__(self) -> str:
        parts = [f"{k} = {format_figure(v['value'], v['unit'])}" for k, v in self._data["figures"].items()]
        return f"ChapterReport({self.chapter}: {'; '.join(parts) or 'no figures yet'})"


def read_figures(chapter: str) -> dict | None:
    """The stored record of ``chapter``, or ``None`` if it never started."""
    path = figures_path(chapter)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
