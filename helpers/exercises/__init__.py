"""Exercise checkers.

Every exercise in a chapter has a stub that raises ``NotImplementedError`` and
a checker cell such as ``check("01.pairwise_sq_dists", pairwise_sq_dists)``.
A checker never stops the notebook: it returns an :class:`ExerciseResult`
whose status is ``"passed"``, ``"failed"`` (with a hint) or
``"not attempted"``. Reference solutions live next to the checkers, one module
per chapter (``helpers/exercises/chNN.py``), and pytest checks each against its
checker, along with wrong answers that must fail.
"""

from __future__ import annotations

import inspect
import pkgutil
import random
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

import torch

__all__ = ["EXERCISES", "Exercise", "ExerciseResult", "check", "exercise", "solution"]


@dataclass
class ExerciseResult:
    """Outcome of one check: ``status`` is "passed", "failed" or "not attempted"."""

    name: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __str__(self) -> str:
        mark = {"passed": "PASSED", "failed": "NOT YET", "not attempted": "TODO"}[self.status]
        return f"[{mark}] exercise {self.name}: {self.message}"

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


@dataclass
class Exercise:
    name: str
    task: str
    test: Callable[[Callable], None]  # raises AssertionError(hint) when the answer is wrong
    reference: Callable


#: All exercises by name, e.g. ``"01.pairwise_sq_dists"``.
EXERCISES: dict[str, Exercise] = {}



def exercise(name: str, task: str, reference: Callable):
    """Decorator registering ``test`` as the checker of exercise ``name``.

    ``test(candidate)`` must raise ``AssertionError`` with a helpful hint when
    ``candidate`` is wrong, and return normally when it is right.
    """

    def register(test: Callable[[Callable], None]) -> Callable[[Callable], None]:
        if name in EXERCISES:
            raise ValueError(f"exercise {name!r} registered twice")
        EXERCISES[name] = Exercise(name, task, test, reference)
        return test

    return register


def _load_all() -> None:
    """Import every ``chNN`` module beside this file, which registers its exercises."""
    for info in pkgutil.iter_modules(__path__):
        if re.fullmatch(r"ch\d\d", info.name):
            import_module(f"{__name__}.{info.name}")


def _get(name: str) -> Exercise:
    _load_all()
    if name not in EXERCISES:
        raise KeyError(f"unknown exercise {name!r}; known: {', '.join(sorted(EXERCISES))}")
    return EXERCISES[name]


def _learner_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """Traceback frames outside installed libraries and outside this package."""
    here = str(Path(__file__).resolve().parent)
    return [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "site-packages" not in f.filename and not str(Path(f.filename).resolve()).startswith(here)
    ]


def _where(exc: BaseException) -> str:
    frames = _learner_frames(exc)
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


def _defined_in(candidate) -> str | None:
    """File (or notebook cell) where ``candidate`` was written, if it can be told."""
    code = getattr(candidate, "__code__", None)
    if code is None and isinstance(candidate, type):  # a class: look at its methods
        code = next((v.__code__ for v in vars(candidate).values() if hasattr(v, "__code__")), None)
    if code is not None:
        return code.co_filename
    try:
        return inspect.getfile(candidate)
    except (TypeError, OSError):
        return None


def _raised_by_learner(exc: NotImplementedError, candidate: Callable) -> bool:
    """True when the NotImplementedError comes straight from the learner's own code (the stub)."""
    last = traceback.extract_tb(exc.__traceback__)[-1].filename
    defined_in = _defined_in(candidate)
    if defined_in is None:
        return "site-packages" not in last
    return last == defined_in or Path(last).resolve() == Path(defined_in).resolve()


def check(name: str, candidate: Callable, *, show: bool = True) -> ExerciseResult:
    """Check a learner's answer to exercise ``name``.

    Args:
        name: e.g. ``"02.second_derivative"``.
        candidate: the learner's function (or class).
        show: print the result line (the notebook's feedback).

    Returns:
        An :class:`ExerciseResult`; it never raises for a wrong answer.
        In a notebook write ``result = check(...)``: the line is printed
        already, so a bare call would show it twice.

    A ``NotImplementedError`` raised by the learner's own code (the stub)
    means "not attempted"; one raised inside a library counts as a failure.
    Checking runs inside ``torch.random.fork_rng`` and restores Python's
    ``random`` state, so it never moves the notebook's random streams.

    Raises:
        KeyError: ``name`` is not a known exercise.
    """
    ex = _get(name)
    python_rng = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            ex.test(candidate)
        result = ExerciseResult(name, "passed", "well done.")
    except NotImplementedError as exc:
        if _raised_by_learner(exc, candidate):
            result = ExerciseResult(name, "not attempted", f"not attempted yet. Task: {ex.task}")
        else:  # e.g. an operator this device does not implement
            result = ExerciseResult(name, "failed", f"your code hit NotImplementedError inside a library: {exc}{_where(exc)}")
    except AssertionError as exc:
        result = ExerciseResult(name, "failed", f"not quite. Hint: {exc}")
    except Exception as exc:  # the learner's code crashed: show where
        result = ExerciseResult(name, "failed", f"your code raised {type(exc).__name__}: {exc}{_where(exc)}")
    finally:
        random.setstate(python_rng)
    if show:
        print(result)
    return result


def solution(name: str) -> Callable:
    """The reference solution of exercise ``name`` (try the exercise first!)."""
    return _get(name).reference
