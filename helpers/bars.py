"""Progress bars for the loops that can run long, shown to learners and kept out of stored outputs.

``bar(iterable, desc=...)`` is ``tqdm.auto.tqdm`` (a widget in JupyterLab,
text in a terminal) that disappears when its loop ends (``leave=False``).
It is off, and returns ``iterable`` itself, when ``$COURSE_PROGRESS_BARS``
is ``0``: the course's own runners set that (``helpers.authoring`` when it
stores outputs, ``helpers.runner`` for ``make run``, the test suite for
nbval and papermill), so stored notebooks and CI logs hold no bars.
A learner who wants silence sets it too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["ENV", "bar", "elapsed_bar", "enabled", "off_in_children"]

ENV = "COURSE_PROGRESS_BARS"


def enabled() -> bool:
    """False when ``$COURSE_PROGRESS_BARS`` is ``0``, ``false`` or ``no``; True otherwise."""
    return os.environ.get(ENV, "").strip().lower() not in {"0", "false", "no"}


def bar(iterable: Iterable, *, desc: str | None = None, total: int | None = None, unit: str = "it") -> Iterable:
    """``iterable``, with a transient progress bar when :func:`enabled` (``total``: length if not ``len()``-able)."""
    if not enabled():
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=False, dynamic_ncols=True)


def off_in_children() -> None:
    """Turn bars off for this process and every process it starts (kernels included): for runners that store outputs."""
    os.environ[ENV] = "0"


class _NoBar:
    def update(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass


def elapsed_bar(desc: str):
    """A bar that shows the seconds spent waiting (for a launched job, say); ``update(dt)`` it and ``close()`` it.

    Returns a ``tqdm`` when :func:`enabled`, else an object whose ``update``
    and ``close`` do nothing.
    """
    if not enabled():
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(desc=desc, total=None, unit="s", leave=False, bar_format="{desc}: {elapsed} elapsed")
