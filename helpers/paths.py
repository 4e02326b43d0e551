"""Where the course keeps things: the project root, ``data/`` and ``build/``.

Every path the notebooks write to comes from here, so a run only touches
``data/`` and ``build/`` (plus the system temp folder), never the home folder.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The course checkout (the folder holding ``pyproject.toml``). ``helpers`` is
#: installed editable, so this is the clone the learner works in.
ROOT = Path(__file__).resolve().parents[1]


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


def mirror_dir() -> Path | None:
    """The offline mirror named by ``$COURSE_DATA_MIRROR``, or ``None`` if unset."""
    value = os.environ.get("COURSE_DATA_MIRROR", "").strip()
    return _from_env("COURSE_DATA_MIRROR", ROOT) if value else None


def rel(path: Path | str) -> str:
    """``path`` relative to the course root when inside it (for tidy, machine-free output)."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
