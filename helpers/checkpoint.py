"""Training checkpoints that survive crashes: atomic writes, checksums, keep-last-K, RNG states.

Chapter 14 teaches the ideas; this module is the version the later chapters
reuse.

A checkpoint is whatever ``dict`` you pass to :func:`save_checkpoint`,
usually ``{"model": model.state_dict(), "optimizer": ..., "scheduler": ...,
"scaler": ..., "step": ..., "rng": rng_state()}``. On disk it is two files in
one folder::

    ckpt-00000300.pt          torch.save's zip archive, loadable with plain torch.load
    ckpt-00000300.pt.sha256   "<64 hex digits>  ckpt-00000300.pt\\n" (the format of `sha256sum`)

Guarantees:

- **Atomic.** Each file is written to a hidden temporary file in the same
  folder, flushed and ``fsync``-ed, then renamed over its final name with
  :func:`os.replace`; so a crash or power cut leaves either the old file or the
  new one, never a half-written one under the final name.
- **Verified.** The sha256 of the ``.pt`` file is stored beside it. A
  truncated or bit-flipped file (which ``torch.load`` may load silently with
  wrong numbers, or reject with an obscure message) fails the check in
  :func:`load_checkpoint` with a :class:`CheckpointError`, and
  :func:`latest_checkpoint` skips it.
- **Bounded.** After the new checkpoint is in place, and only then, older
  ones are pruned so that the newest ``keep_last`` remain.
- **Safe to load.** :func:`load_checkpoint` uses ``torch.load(weights_only=True)``,
  so only tensors and plain Python containers and numbers are unpickled; the
  RNG states from :func:`rng_state` are stored in that form.
"""

from __future__ import annotations

import os
import random
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from .data import file_digest
from .paths import atomic_write, rel

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "checkpoint_path",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "verify_checkpoint",
]

class CheckpointError(RuntimeError):
    """A checkpoint file is missing, incomplete, corrupt or cannot be loaded safely.

    The message names the file, says what is wrong and what to do instead.
    """


class CheckpointWarning(UserWarning):
    """:func:`latest_checkpoint` skipped a checkpoint that failed verification."""


# --------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix or "/" in prefix or "\\" in prefix or prefix.startswith("."):
        raise ValueError(f"prefix must be a non-empty file-name part without '/' and not starting with '.', got {prefix!r}")
    return prefix


def _check_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0 (e.g. the number of optimizer steps taken), got {step!r}")
    return step


def checkpoint_path(directory: str | os.PathLike, step: int, prefix: str = "ckpt") -> Path:
    """The file name :func:`save_checkpoint` uses: ``<directory>/<prefix>-<step:08d>.pt``.

    Raises:
        ValueError: ``step`` is not an int >= 0, or ``prefix`` is empty or contains a path separator.
    """
    return Path(directory) / f"{_check_prefix(prefix)}-{_check_step(step):08d}.pt"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _step_of(path: Path, prefix: str) -> int | None:
    match = re.fullmatch(rf"{re.escape(prefix)}-(\d{{8,}})\.pt", path.name)
    return int(match.group(1)) if match else None


def _sha256(path: Path) -> str:
    return file_digest(path, "sha256")


def _fsync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_synced(tmp: Path, write) -> None:
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


# --------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------


def save_checkpoint(
    state: dict[str, Any],
    directory: str | os.PathLike,
    step: int,
    keep_last: int = 3,
    prefix: str = "ckpt",
) -> Path:
    """Write ``state`` to ``<directory>/<prefix>-<step:08d>.pt`` atomically, with a checksum; prune old ones.

    Order of operations, each safe to interrupt: (1) any old checksum file of
    the same step is removed; (2) ``torch.save`` writes a hidden temporary file
    in ``directory``, which is flushed, ``fsync``-ed and hashed (sha256), then
    renamed to the final name with :func:`os.replace`; (3) the checksum file
    is written the same way; (4) only now are older checkpoints deleted, so
    that the ``keep_last`` highest steps remain (the one just written is never
    deleted, even if a file with a higher step exists, e.g. after resuming
    from an earlier checkpoint). A crash at any point leaves the previous
    checkpoints intact and no temporary file behind (a hard kill may leave a
    hidden ``.<name>.*.part`` file, which is never mistaken for a checkpoint).
    A ``.pt`` without its checksum file counts as unverified and is skipped by
    :func:`latest_checkpoint`.

    Args:
        state: the dict to save; for :func:`load_checkpoint` to read it back it
            must hold only what ``torch.load(weights_only=True)`` accepts:
            tensors, ``state_dict()``s, ``dict``/``list``/``tuple``/``set``,
            ``int``/``float``/``bool``/``str``/``bytes``/``None`` (use
            :func:`rng_state` for random-generator states, and convert NumPy
            values with ``.item()`` or ``torch.as_tensor``).
        directory: the folder, created if needed.
        step: an int >= 0 that orders the checkpoints, usually the number of
            optimizer steps taken so far.
        keep_last: how many checkpoints (highest steps) to keep, >= 1.
        prefix: the file-name prefix, e.g. ``"ckpt"`` or ``"best"``; different
            prefixes in one folder are listed and pruned separately.

    Returns:
        The path of the new ``.pt`` file.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: ``step`` < 0, ``keep_last`` < 1, or a bad ``prefix``.
        OSError: the folder is not writable, the disk is full, ...
        Whatever ``torch.save`` raises (e.g. ``pickle.PicklingError`` for an
        object it cannot pickle); the previous checkpoints are then untouched.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict (e.g. {{'model': model.state_dict(), 'step': step}}), got {type(state).__name__}")
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an int >= 1 (the newest checkpoint is always kept), got {keep_last!r}")
    path = checkpoint_path(directory, step, prefix)
    path.parent.mkdir(parents=True, exist_ok=True)

    _sidecar(path).unlink(missing_ok=True)  # an old checksum must never vouch for the new file
    digest = {}

    def verify(tmp: Path) -> None:
        digest["sha256"] = _sha256(tmp)  # the bytes as they are on disk, after fsync

    atomic_write(path, lambda tmp: _write_synced(tmp, lambda f: torch.save(state, f)), verify)
    line = f"{digest['sha256']}  {path.name}\n".encode()
    atomic_write(_sidecar(path), lambda tmp: _write_synced(tmp, lambda f: f.write(line)))
    _fsync_directory(path.parent)

    older = [p for p in list_checkpoints(path.parent, prefix) if p != path]
    keep = set(sorted([*older, path], key=lambda p: _step_of(p, prefix))[-keep_last:]) | {path}
    for old in older:
        if old not in keep:
            old.unlink(missing_ok=True)
            _sidecar(old).unlink(missing_ok=True)
    return path


# --------------------------------------------------------------------------
# Finding and verifying
# --------------------------------------------------------------------------


def list_checkpoints(directory: str | os.PathLike, prefix: str = "ckpt") -> list[Path]:
    """The ``<prefix>-<step>.pt`` files in ``directory``, oldest (lowest step) first.

    Only names :func:`save_checkpoint` produces are listed (not temporary
    files, not checksum files, not other prefixes). Nothing is verified; see
    :func:`verify_checkpoint`. A folder that does not exist gives ``[]``.

    Raises:
        ValueError: a bad ``prefix``.
    """
    _check_prefix(prefix)
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = [(step, p) for p in folder.iterdir() if p.is_file() and (step := _step_of(p, prefix)) is not None]
    return [p for _, p in sorted(found)]


def verify_checkpoint(path: str | os.PathLike) -> str:
    """Check ``path`` against its ``.sha256`` file; return the digest (64 hex digits).

    Raises:
        CheckpointError: the file or its checksum file is missing or unreadable,
            the checksum file is malformed, or the digests differ (the file was
            truncated, modified or damaged after it was saved).
    """
    path = Path(path)
    name = rel(path)
    hint = "use an earlier checkpoint: helpers.checkpoint.latest_checkpoint(folder) returns the newest one that verifies"
    if not path.is_file():
        raise CheckpointError(f"checkpoint {name} does not exist; {hint}")
    sidecar = _sidecar(path)
    try:
        recorded = sidecar.read_text(encoding="utf-8").split()
    except FileNotFoundError:
        raise CheckpointError(
            f"checkpoint {name} has no checksum file {sidecar.name}: it was not written by save_checkpoint, or "
            f"the save was interrupted before it finished; {hint} (or, if you trust the file, torch.load it directly)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"cannot read the checksum file of checkpoint {name} ({err}); {hint}") from err
    if len(recorded) < 1 or not re.fullmatch(r"[0-9a-f]{64}", recorded[0]):
        raise CheckpointError(f"the checksum file of checkpoint {name} is malformed (expected 64 hex digits); {hint}")
    try:
        actual = _sha256(path)
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {name} ({err}); {hint}") from err
    if actual != recorded[0]:
        raise CheckpointError(
            f"checkpoint {name} is corrupt: its sha256 is {actual[:12]}..., but {recorded[0][:12]}... was recorded "
            f"when it was saved ({path.stat().st_size:,} bytes now; truncated, modified or damaged since); {hint}"
        )
    return actual


def latest_checkpoint(directory: str | os.PathLike, prefix: str = "ckpt", valid_only: bool = True) -> Path | None:
    """The newest (highest-step) checkpoint in ``directory``, or ``None`` if there is none.

    Args:
        directory: the folder :func:`save_checkpoint` wrote to.
        prefix: as given to :func:`save_checkpoint`.
        valid_only: verify checksums, newest first, and skip each checkpoint
            that fails with a :class:`CheckpointWarning` naming it and the
            reason; ``False`` returns the newest file without reading it.

    Raises:
        ValueError: a bad ``prefix``.
    """
    for path in reversed(list_checkpoints(directory, prefix)):
        if not valid_only:
            return path
        try:
            verify_checkpoint(path)
        except CheckpointError as err:
            warnings.warn(f"skipping a checkpoint that fails verification: {err}", CheckpointWarning, stacklevel=2)
            continue
        return path
    return None


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Verify ``path`` against its checksum, then ``torch.load(path, map_location, weights_only=True)``.

    Args:
        path: a ``.pt`` file written by :func:`save_checkpoint`.
        map_location: where the tensors go, as for ``torch.load``: a device
            string or ``torch.device`` (``"cpu"``, the default, loads a GPU
            checkpoint on any machine), a dict such as ``{"cuda:1": "cuda:0"}``,
            or a function; ``None`` restores each tensor to the device it was
            saved from.

    Returns:
        The saved dict.

    Raises:
        CheckpointError: the file is missing, has no checksum file, fails its
            checksum, is not a dict, or cannot be unpickled with
            ``weights_only=True`` (the message then names the offending type;
            see ``torch.serialization.add_safe_globals``). The original
            exception is chained as ``__cause__``.
    """
    path = Path(path)
    verify_checkpoint(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # UnpicklingError, RuntimeError from the zip reader, a missing device, ...
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        detail = next((line.strip() for line in str(err).splitlines() if "WeightsUnpickler error" in line), first)
        raise CheckpointError(
            f"checkpoint {rel(path)} passed its checksum but torch.load(weights_only=True) failed with "
            f"{type(err).__name__}: {detail}. If it holds a custom type you trust, allow it with "
            f"torch.serialization.add_safe_globals; for a device that is missing here, pass map_location"
        ) from err
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {rel(path)} holds a {type(state).__name__}, not the dict save_checkpoint writes")
    return state


# --------------------------------------------------------------------------
# Random-number generator states
# --------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """The states of every global random generator, in a form ``torch.load(weights_only=True)`` accepts.

    Returns:
        A dict with

        - ``"python"``: ``random.getstate()``, a tuple ``(version, tuple of 625 ints, None or float)``;
        - ``"numpy"`` (only when NumPy is installed): the legacy global
          generator ``np.random.get_state()`` as ``{"bit_generator": str,
          "state": int64 tensor [624], "pos": int, "has_gauss": int,
          "cached_gaussian": float}`` (the raw NumPy array would need an
          unsafe global to load);
        - ``"torch"``: ``torch.get_rng_state()``, a uint8 CPU tensor;
        - ``"cuda"`` (only when CUDA is available): ``torch.cuda.get_rng_state_all()``,
          a list with one uint8 CPU tensor per GPU.

        NumPy ``Generator`` objects you created yourself (``np.random.default_rng``)
        and ``torch.Generator`` objects (e.g. a DataLoader's) are not global:
        save their states yourself (``generator.get_state()``).
    """
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:  # numpy is optional for torch
        pass
    else:
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = {
            "bit_generator": str(name),
            "state": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generator states saved by :func:`rng_state` (e.g. after a ``load_checkpoint``).

    Each key present is restored; a missing key leaves that generator alone.
    Tensors may come back on any device (``map_location``): they are moved to
    the CPU first. CUDA states are restored when CUDA is available; if the
    number of GPUs differs from when they were saved, the common ones are
    restored, and either mismatch gives a ``RuntimeWarning``.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: a state has the wrong form (the message names which one).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be the dict rng_state() returned, got {type(state).__name__}")
    unknown = set(state) - {"python", "numpy", "torch", "cuda"}
    if unknown:
        raise ValueError(f"unknown generator(s) {sorted(unknown)}; expected keys of rng_state(): python, numpy, torch, cuda")
    if "python" in state:
        try:
            version, internal, gauss = state["python"]
            random.setstate((int(version), tuple(int(v) for v in internal), gauss))
        except (TypeError, ValueError) as err:
            raise ValueError(f"state['python'] is not a random.getstate() tuple: {err}") from err
    if "numpy" in state:
        import numpy as np

        s = state["numpy"]
        try:
            keys = torch.as_tensor(s["state"]).cpu().numpy().astype(np.uint32)
            np.random.set_state((s["bit_generator"], keys, int(s["pos"]), int(s["has_gauss"]), float(s["cached_gaussian"])))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"state['numpy'] is not what rng_state() stores: {err!r}") from err
    if "torch" in state:
        t = state["torch"]
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
            raise ValueError(f"state['torch'] must be the uint8 tensor of torch.get_rng_state(), got {type(t).__name__}")
        torch.set_rng_state(t.cpu())
    if "cuda" in state:
        saved = list(state["cuda"])
        if not torch.cuda.is_available():
            warnings.warn(f"the checkpoint has CUDA generator states for {len(saved)} GPU(s), but CUDA is not available: not restored", RuntimeWarning, stacklevel=2)
            return
        here = torch.cuda.device_count()
        if here != len(saved):
            warnings.warn(f"the checkpoint has CUDA generator states for {len(saved)} GPU(s), this machine has {here}: restoring the first {min(here, len(saved))}", RuntimeWarning, stacklevel=2)
        for index, t in enumerate(saved[:here]):
            torch.cuda.set_rng_state(torch.as_tensor(t).cpu(), index)
