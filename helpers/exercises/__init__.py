"""Exercise checkers.

Every exercise in a chapter has a stub that raises ``NotImplementedError`` and
a checker cell such as ``check("01.pairwise_sq_dists", pairwise_sq_dists)``.
A checker never stops the notebook: it returns an :class:`ExerciseResult`
whose status is ``"passed"``, ``"failed"`` (with a hint) or
``"not attempted"``. Reference solutions live next to the checkers, one module
per chapter (``helpers/exercises/chNN.py``), and pytest checks each against its
checker, along with wrong answers that must fail.

What a checker can use besides plain ``assert``:

- ``shortcuts=`` on :func:`exercise`: library functions the exercise asks the
  learner to write themselves. A direct call of one from the learner's code
  fails the answer with a friendly message (see :mod:`helpers.exercises.guards`).
- :class:`Hint`: ``raise Hint(what, more)`` for tiered feedback. The first failure shows only ``what`` (the case, expected
  against actual, a nudge); a second failed attempt, or ``hint(name)``, adds
  ``more``. ``solution(name)`` stays there for when the learner is stuck.
- :func:`expect_type`: the exact return type the task states.

Every verdict is also appended to a local progress ledger (``make progress``,
:mod:`helpers.exercises.progress`): the exercise, the verdict and the time,
never the learner's code.
"""

from __future__ import annotations

import functools
import inspect
import os
import pkgutil
import random
import re
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import CodeType

import torch

from . import progress
from .guards import Shortcut, ShortcutUsed, guard, lazy_pending

__all__ = [
    "EXERCISES", "Exercise", "ExerciseResult", "Hint", "Shortcut", "check", "exercise", "expect_type",
    "hint", "solution",
]

_HELPERS_DIR = str(Path(__file__).resolve().parents[1])


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


class Hint(AssertionError):
    """A wrong answer, told in two tiers.

    Args:
        what: what is wrong: the case, the expected and the actual value or shape,
            and a nudge, but not the fix. Shown on the first failure.
        more: the fuller hint, shown on a second failed attempt or by :func:`hint`.
    """

    def __init__(self, what: str, more: str = ""):
        super().__init__(what)
        self.what = what
        self.more = more


@dataclass
class Exercise:
    name: str
    task: str
    test: Callable[[Callable], None]  # raises AssertionError(hint) when the answer is wrong
    reference: Callable
    shortcuts: tuple[str | Shortcut, ...] = ()
    goal: str = "this"  # what the learner writes themselves, for the shortcut message
    hint: str = ""  # a general hint, for hint(name) before any failure

    def is_checker_code(self, code: CodeType) -> bool:
        """The checker's own code (its calls may use any shortcut), not the reference solution's.

        That is the checker function and the functions nested in it, and the
        course's ``helpers`` package, except the reference solution.
        """
        if code in _nested_codes(self.test.__code__):
            return True
        if not code.co_filename.startswith(_HELPERS_DIR):
            return False
        ref = self.reference
        ref_code = getattr(ref, "__code__", None)
        ref_file = ref_code.co_filename if ref_code is not None else inspect.getsourcefile(ref)
        if ref_file != code.co_filename:
            return True
        qualname = getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11+
        return not (qualname == ref.__qualname__ or qualname.startswith(ref.__qualname__ + "."))


def _nested_codes(code: CodeType) -> set[CodeType]:
    found = {code}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            found |= _nested_codes(const)
    return found


#: All exercises by name, e.g. ``"01.pairwise_sq_dists"``.
EXERCISES: dict[str, Exercise] = {}


def exercise(name: str, task: str, reference: Callable, *, shortcuts: Sequence[str | Shortcut] = (),
             goal: str = "this", hint: str = ""):
    """Decorator registering ``test`` as the checker of exercise ``name``.

    ``test(candidate)`` must raise ``AssertionError`` (or :class:`Hint`) when
    ``candidate`` is wrong, and return normally when it is right.

    Args:
        shortcuts: library functions the learner is asked to write themselves
            (dotted names or :class:`Shortcut` s); see :mod:`helpers.exercises.guards`.
        goal: what the learner writes, for the message "this exercise asks you to
            write {goal} yourself; `torch.cdist` does it for you".
        hint: a general hint that :func:`hint` gives before any failure.

    Raises:
        ValueError: the name is registered twice, or a shortcut names nothing.
    """
    for item in shortcuts:  # fail at import, not in the middle of a learner's check
        from .guards import _as_shortcut, _expand

        if not _as_shortcut(item).lazy:  # a lazy one is resolved only once its package is imported
            list(_expand(_as_shortcut(item)))

    def register(test: Callable[[Callable], None]) -> Callable[[Callable], None]:
        if name in EXERCISES:
            raise ValueError(f"exercise {name!r} registered twice")
        EXERCISES[name] = Exercise(name, task, test, reference, tuple(shortcuts), goal, hint)
        return test

    return register


def expect_type(value, expected: type | tuple[type, ...], what: str = "your function's result") -> None:
    """Fail with a :class:`Hint` unless ``value`` has exactly the stated type.

    ``bool`` does not pass for ``int`` (it is a subclass in Python), and a
    tensor never passes for a Python number.

    Raises:
        Hint: naming the type expected and the type got.
    """
    kinds = expected if isinstance(expected, tuple) else (expected,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        want = " or ".join(k.__name__ for k in kinds)
        got = type(value).__name__
        more = ""
        if isinstance(value, torch.Tensor) and set(kinds) & {int, float}:
            more = "A one-element tensor becomes a Python number with .item()."
        raise Hint(f"{what} should be a Python {want}, got {got}.", more)


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
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    last = frame.filename
    if frame.line and not frame.line.lstrip().startswith("raise"):
        return False  # raised inside a call on that line: a torch kernel without this backend, not the stub
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
    handed_over = _shortcut_passed_as_answer(ex, candidate)
    if handed_over is not None:  # check(name, torch.cdist): the guard only sees calls
        result = ExerciseResult(name, "failed", f"not quite: {_shortcut_message(ex, handed_over)}")
        progress.record(name, result.status)
        if show:
            print(result)
        return result
    python_rng = random.getstate()
    used: list[str] = []
    try:
        pending = lazy_pending(ex.shortcuts)
        for _attempt in range(2):
            # The CUDA generators too where they exist: torch.manual_seed inside a checker reseeds them.
            with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []):
                with guard(ex.shortcuts, goal=ex.goal, checker_code=ex.is_checker_code,
                           learner_globals=_learner_namespaces(candidate),
                           learner_cells=getattr(candidate, "__closure__", None) or ()) as g:
                    used = g.used
                    ex.test(candidate)
            # a lazy shortcut's package imported by the answer itself: check again, now guarded
            if not any(s.package in sys.modules for s in pending):
                break
            pending = []
        result = ExerciseResult(name, "passed", "well done.")
    except NotImplementedError as exc:
        if _raised_by_learner(exc, candidate):
            result = ExerciseResult(name, "not attempted", f"not attempted yet. Task: {ex.task}")
        else:  # e.g. an operator this device does not implement
            result = ExerciseResult(name, "failed", f"your code hit NotImplementedError inside a library: {exc}{_where(exc)}")
    except AssertionError as exc:
        result = ExerciseResult(name, "failed", _failure_message(name, exc))
    except Exception as exc:  # the learner's code crashed: show where
        result = ExerciseResult(name, "failed", f"your code raised {type(exc).__name__}: {exc}{_where(exc)}")
    finally:
        random.setstate(python_rng)
    if used and "yourself" not in result.message:
        # the learner's code called a shortcut and caught the refusal: still a failure
        result = ExerciseResult(name, "failed", f"not quite: {_shortcut_message(ex, used[0])}")
    progress.record(name, result.status)
    if show:
        print(result)
    return result


def _shortcut_passed_as_answer(ex: Exercise, candidate) -> str | None:
    """The shortcut's name when ``candidate`` is the shortcut itself (unwrapped from partials and decorators)."""
    if not ex.shortcuts:
        return None
    from .guards import _as_shortcut, _expand

    target = candidate
    while isinstance(target, functools.partial):
        target = target.func
    try:
        target = inspect.unwrap(target)  # functools.wraps wrappers, with a guard against cycles
    except ValueError:
        return None
    for item in ex.shortcuts:
        for shortcut, _owner, _attr, obj in _expand(_as_shortcut(item)):
            try:  # a decorated shortcut (clip_grad_norm_ is wrapped by _no_grad) is compared unwrapped too
                inner = inspect.unwrap(obj) if callable(obj) else obj
            except ValueError:
                inner = obj
            if target is obj or target is inner or (
                    isinstance(obj, type) and isinstance(target, type) and issubclass(target, obj)
                    and target.__module__.startswith("torch")):
                return shortcut.name
    return None


def _shortcut_message(ex: Exercise, used: str) -> str:
    return f"this exercise asks you to write {ex.goal} yourself; `{used}` does it for you."


def _learner_namespaces(candidate) -> list[dict]:
    """Where the learner may have imported a shortcut by name: the answer's module and the notebook."""
    spaces = []
    module_globals = getattr(candidate, "__globals__", None)
    if module_globals is None and isinstance(candidate, type):
        module = sys.modules.get(candidate.__module__)
        module_globals = vars(module) if module is not None else None
    if module_globals is not None:
        spaces.append(module_globals)
    main = sys.modules.get("__main__")
    if main is not None:
        spaces.append(vars(main))
    return spaces


#: Failed attempts per exercise in this session, and the fuller hint of the last one.
_failures: Counter = Counter()
_fuller: dict[str, str] = {}
#: Exercises whose last failures said everything in one message (no fuller hint to give).
_plain_failed: set[str] = set()


def _failure_message(name: str, exc: AssertionError) -> str:
    tiered = exc if isinstance(exc, Hint) else (exc.args[0] if exc.args and isinstance(exc.args[0], Hint) else None)
    if isinstance(exc, ShortcutUsed):
        return f"not quite: {exc}"
    if tiered is None:  # a plain assertion message: one tier
        _plain_failed.add(name)
        return f"not quite. Hint: {exc}"
    _failures[name] += 1
    _fuller[name] = tiered.more
    message = f"not quite: {tiered.what}"
    if tiered.more and _failures[name] >= 2:
        message += f" Hint: {tiered.more}"
    elif tiered.more:
        message += f' (hint("{name}") gives a fuller hint)'
    return message


def hint(name: str, *, show: bool = True) -> str:
    """The fuller hint for exercise ``name``: for its last failed check, or a general one.

    Raises:
        KeyError: ``name`` is not a known exercise.
    """
    ex = _get(name)
    text = _fuller.get(name) or ex.hint
    if not text:
        text = ("no fuller hint here: the check's message already says all it knows; compare your result with the "
                "case it names." if name in _plain_failed else
                f'no general hint for this exercise; run its check first: a failed check names the case that went '
                f'wrong, and hint("{name}") then gives the fuller hint for that case where there is one.')
    if show:
        print(f"hint for {name}: {text}")
    return text


def solution(name: str) -> Callable:
    """The reference solution of exercise ``name`` (try the exercise first!).

    Raises:
        KeyError: ``name`` is not a known exercise.
        PermissionError: ``$COURSE_HIDE_SOLUTIONS`` is set (``1``, ``true``
            or ``yes``): a teacher hides the solutions for a graded session
            (``TEACHING.md``). Checks and hints still work.
    """
    ex = _get(name)
    if os.environ.get("COURSE_HIDE_SOLUTIONS", "").strip().lower() in {"1", "true", "yes"}:
        raise PermissionError(f"solutions are hidden in this session (COURSE_HIDE_SOLUTIONS is set), so "
                              f"solution({name!r}) is not available; check({name!r}, ...) and hint({name!r}) still are")
    return ex.reference
