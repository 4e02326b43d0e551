"""Where the course keeps things: the project root, ``data/`` and ``build/``.

Every path the notebooks write to comes from here, so a run only touches
``data/`` and ``build/`` (plus the system temp folder), never the home folder.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

#: The course checkout (the folder holding ``pyproject.toml``). ``helpers`` is
#: installed editable, so this is the clone the learner works in.
ROOT = Path(__file__).resolve().parents[1]
#: The chapters as learners open them: ``NN_topic.ipynb``, with stored outputs.
NOTEBOOKS = ROOT / "notebooks"
#: Their sources, jupytext percent-format ``NN_topic.py`` files, kept one folder down so that
#: JupyterLab's file browser shows one entry per chapter.
SOURCES = NOTEBOOKS / "src"
#: The jupytext pairing stored in every notebook: the ``src//`` prefix puts the ``.py`` in ``SOURCES``.
JUPYTEXT_FORMATS = "ipynb,src//py:percent"


def chapter_source(stem: str) -> Path:
    """The jupytext source of chapter ``stem`` (for example ``"04_linear_regression"``): ``notebooks/src/<stem>.py``."""
    return SOURCES / f"{stem}.py"


def chapter_notebook(stem: str) -> Path:
    """The notebook of chapter ``stem``: ``notebooks/<stem>.ipynb``."""
    return NOTEBOOKS / f"{stem}.ipynb"


def _from_env(var: str, default: Path) -> Path:
    value = os.environ.get(var, "").strip()
    if not value:
        return default
    path = Path(value).expanduser()
    # Relative paths are read from the course root, not from the notebook's
    # working directory (notebooks run inside notebooks/).
    return path if path.is_absolute() else (ROOT / path).resolve()


def data_dir() -> Path:
    """Folder where datasets land: ``$COURSE_DATA_DIR`` or ``<root>/data``."""
    return _from_env("COURSE_DATA_DIR", ROOT / "data")


def build_dir() -> Path:
    """Folder for everything a run produces: ``$COURSE_BUILD_DIR`` or ``<root>/build``."""
    return _from_env("COURSE_BUILD_DIR", ROOT / "build")


def _is_url(value: str) -> bool:
    return value.lower().startswith(("http://", "https://"))


def mirror_dir() -> Path | None:
    """The folder mirror named by ``$COURSE_DATA_MIRROR``; ``None`` if unset or an http(s) URL (see :func:`mirror_url`)."""
    value = os.environ.get("COURSE_DATA_MIRROR", "").strip()
    return _from_env("COURSE_DATA_MIRROR", ROOT) if value and not _is_url(value) else None


def mirror_url() -> str | None:
    """The HTTP mirror named by ``$COURSE_DATA_MIRROR`` (an ``http://`` or ``https://`` URL), else ``None``."""
    value = os.environ.get("COURSE_DATA_MIRROR", "").strip()
    return value if _is_url(value) else None


def rel(path: Path | str) -> str:
    """``path`` relative to the course root when inside it (for tidy, machine-free output)."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(dest: Path, fill: Callable[[Path], None], verify: Callable[[Path], None] | None = None) -> None:
    """Create or replace ``dest`` so that no reader ever sees a partial file.

    ``fill(tmp)`` writes the content into a temporary sibling of ``dest``;
    ``verify(tmp)``, if given, may raise to reject it. Only then is the
    temporary file renamed over ``dest`` with :func:`os.replace`, which is
    atomic on POSIX (on Windows it replaces the file in one step on the same drive). The temporary file is removed on any error
    (including Ctrl-C), and gets the usual permissions (0666 minus the umask),
    not ``mkstemp``'s private 0600, so a shared data folder stays readable.

    Raises:
        OSError: the folder is not writable, the disk is full, ...
        Whatever ``fill`` or ``verify`` raise (``dest`` is then untouched).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        fill(tmp)
        if verify is not None:
            verify(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(dest: Path, text: str) -> None:
    """:func:`atomic_write` for UTF-8 text."""
    atomic_write(dest, lambda tmp: tmp.write_text(text, encoding="utf-8"))
