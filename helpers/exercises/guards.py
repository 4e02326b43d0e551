"""Shortcut guards: an exercise names the library functions it asks the learner to write.

While a checker runs, a *direct* call of a named function from the learner's
code is refused: it raises :class:`ShortcutUsed` (an ``AssertionError``, so a
checker reports it as a failed answer) and the use is recorded, so an answer
that swallows the exception still fails. Everything else works as usual:

- the checker's own calls (to compute the expected answer) are allowed;
- a library calling the function internally is allowed (``nn.Linear``
  initialising itself with ``nn.init.kaiming_uniform_`` does not make
  ``kaiming_uniform_`` a shortcut the learner took);
- every patched name is restored when the check ends, even if it raised.

How calls are seen:

- **torch operators** (``torch.cdist``, ``torch.logsumexp``, ``F.one_hot``,
  the ``Tensor`` methods of the same name) through a
  :class:`torch.overrides.TorchFunctionMode`, which sees the call however
  the function was imported or aliased;
- **Python classes** (``torch.optim.SGD``, ``nn.Linear``) by a temporary
  ``__init__``, so constructing the class, or a torch subclass of it, is seen
  (a learner's own subclass calling ``super().__init__`` is a direct use too);
- **Python functions** (``clip_grad_norm_``, ``torch.autograd.functional.*``)
  by temporarily rebinding the name in its module, in the module it was
  reached from, and in the learner's globals.

"Direct" means the first frame above the call that is not plumbing (this
module, ``torch.overrides``, the ``torch.ops`` call wrappers, the function's own wrapper, ``functools``) is
neither inside ``torch`` nor one of the checker's own functions.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FunctionType, ModuleType

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["Shortcut", "ShortcutUsed", "guard"]

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_THIS_FILE = str(Path(__file__).resolve())
_TORCH_PLUMBING = ("torch/overrides.py", "torch/utils/_python_dispatch.py", "torch/_ops.py")  # _ops: torch.ops.aten.* call wrappers
_PLUMBING = {_THIS_FILE, str(Path(functools.__file__).resolve()), str(Path(inspect.__file__).resolve())}


class ShortcutUsed(AssertionError):
    """The learner's code called a function the exercise asks them to write themselves."""


@dataclass(frozen=True)
class Shortcut:
    """A library function an exercise forbids.

    Attributes:
        name: its dotted name, e.g. ``"torch.cdist"``, ``"torch.optim.Optimizer"``
            (a class: the class and every torch subclass), or ``"torch.autograd.functional.*"``
            (every public function defined in that module).
        when: forbid only the calls for which ``when(args, kwargs)`` is true,
            e.g. ``lambda a, k: k.get("enable_gqa")``.
        does: what it would do for the learner, for the message (default: the name).
    """

    name: str
    when: Callable[[tuple, dict], bool] | None = None
    does: str = ""


def _as_shortcut(item: str | Shortcut) -> Shortcut:
    return item if isinstance(item, Shortcut) else Shortcut(item)


def _resolve(dotted: str) -> tuple[object, str, object]:
    """``"torch.nn.functional.one_hot"`` -> (what it is reached from, ``"one_hot"``, the object).

    Raises:
        ValueError: no such attribute in the installed packages.
    """
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:-1]:
                owner = getattr(owner, attr)
            return owner, parts[-1], getattr(owner, parts[-1])
        except AttributeError:
            break
    raise ValueError(f"shortcut {dotted!r} does not name anything in the installed torch")


def _expand(shortcut: Shortcut) -> Iterator[tuple[Shortcut, object, str, object]]:
    if shortcut.name.endswith(".*"):
        module = importlib.import_module(shortcut.name[:-2])
        for attr, obj in vars(module).items():
            if not attr.startswith("_") and isinstance(obj, FunctionType) and obj.__module__ == module.__name__:
                yield Shortcut(f"{module.__name__}.{attr}", shortcut.when, shortcut.does), module, attr, obj
        return
    owner, attr, obj = _resolve(shortcut.name)
    yield shortcut, owner, attr, obj


class _Guard:
    def __init__(self, shortcuts: Iterable[str | Shortcut], checker_code: Callable[[CodeType], bool], goal: str):
        self.goal = goal
        self.is_checker = checker_code
        self.used: list[str] = []
        self.ops: dict[object, Shortcut] = {}  # torch operators, seen by the mode
        self.classes: list[tuple[type, Shortcut]] = []
        self.functions: list[tuple[object, str, FunctionType, Shortcut]] = []
        for item in shortcuts:
            for shortcut, owner, attr, obj in _expand(_as_shortcut(item)):
                if isinstance(obj, type):
                    self.classes.append((obj, shortcut))
                elif isinstance(obj, FunctionType) and not _torch_function_aware(obj):
                    self.functions.append((owner, attr, obj, shortcut))
                else:  # a builtin operator, or a Python function that dispatches __torch_function__
                    self.ops[obj] = shortcut
                    # torch.logsumexp and Tensor.logsumexp are one shortcut
                    is_torch_module = isinstance(owner, ModuleType) and owner.__name__.startswith("torch")
                    method = getattr(torch.Tensor, attr, None) if is_torch_module else None
                    if method is not None:
                        self.ops[method] = shortcut

    # -- who called? ------------------------------------------------------
    def learner_called(self, skip: CodeType | set[CodeType] | None = None) -> bool:
        """Is the nearest caller that is not plumbing (nor ``skip``) the learner's code?"""
        skip_codes = skip if isinstance(skip, set) else {skip}
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            filename = code.co_filename
            if filename in _PLUMBING or code in skip_codes or filename.endswith(_TORCH_PLUMBING):
                frame = frame.f_back
                continue
            if filename.startswith(_TORCH_DIR):
                return False  # torch calling itself
            return not self.is_checker(code)
        return False

    def refuse(self, shortcut: Shortcut) -> None:
        self.used.append(shortcut.name)
        does = shortcut.does or f"`{shortcut.name}`"
        raise ShortcutUsed(f"this exercise asks you to write {self.goal} yourself; {does} does it for you.")

    def wants(self, shortcut: Shortcut, args: tuple, kwargs: dict) -> bool:
        return shortcut.when is None or bool(shortcut.when(args, kwargs or {}))


def _torch_function_aware(fn: FunctionType) -> bool:
    """Does this Python function dispatch ``__torch_function__`` (like ``torch.cdist``)?"""
    names = fn.__code__.co_names
    return "has_torch_function" in names or "handle_torch_function" in names or "has_torch_function_variadic" in names


class _Mode(TorchFunctionMode):
    def __init__(self, guard: _Guard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        shortcut = self.guard.ops.get(func)
        if shortcut is not None and self.guard.wants(shortcut, args, kwargs):
            if self.guard.learner_called(getattr(func, "__code__", None)):
                self.guard.refuse(shortcut)
        return func(*args, **kwargs)


def _torch_init_codes(klass: type) -> set[CodeType]:
    """The ``__init__`` code of every torch class in ``klass``'s MRO (a ``super().__init__`` chain)."""
    codes = set()
    for k in klass.__mro__:
        init = vars(k).get("__init__")
        if isinstance(init, FunctionType) and init.__code__.co_filename.startswith(_TORCH_DIR):
            codes.add(init.__code__)
    return codes


def _patch_class(guard: _Guard, cls: type, shortcut: Shortcut) -> Callable[[], None]:
    # __init__, not __new__: CPython cannot undo an assigned __new__ (after `del`,
    # object.__new__ rejects constructor arguments), while __init__ restores cleanly.
    had_own = "__init__" in vars(cls)
    original = vars(cls).get("__init__")
    inherited = cls.__init__

    def __init__(self, *args, **kwargs):
        if guard.wants(shortcut, args, kwargs) and guard.learner_called(_torch_init_codes(type(self))):
            guard.refuse(shortcut)
        inherited(self, *args, **kwargs)

    cls.__init__ = __init__

    def restore() -> None:
        if had_own:
            cls.__init__ = original
        else:
            del cls.__init__

    return restore


def _patch_function(guard: _Guard, owner: object, attr: str, fn: FunctionType, shortcut: Shortcut,
                    extra_namespaces: list[dict]) -> Callable[[], None]:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if guard.wants(shortcut, args, kwargs) and guard.learner_called(fn.__code__):
            guard.refuse(shortcut)
        return fn(*args, **kwargs)

    namespaces = [vars(owner), vars(sys.modules[fn.__module__]), *extra_namespaces]
    rebound: list[tuple[dict, str]] = []
    for ns in namespaces:
        for name, value in list(ns.items()):
            if value is fn:
                ns[name] = wrapper
                rebound.append((ns, name))

    def restore() -> None:
        for ns, name in rebound:
            if ns.get(name) is wrapper:
                ns[name] = fn

    return restore


@contextmanager
def guard(shortcuts: Iterable[str | Shortcut], *, goal: str, checker_code: Callable[[CodeType], bool],
          learner_globals: Iterable[dict] = ()) -> Iterator[_Guard]:
    """Refuse direct calls of ``shortcuts`` from the learner's code inside the block.

    Args:
        shortcuts: dotted names or :class:`Shortcut` s.
        goal: what the learner is asked to write, for the message ("the pairwise distances").
        checker_code: true for the code objects of the checker itself (its calls are allowed).
        learner_globals: namespaces where the learner may have imported a function by name
            (the candidate's ``__globals__``, the notebook's ``__main__``).

    Yields:
        The guard; ``guard.used`` lists the shortcuts that were called, even if the learner's
        code caught the :class:`ShortcutUsed` it raised.

    Raises:
        ValueError: a name does not exist in the installed torch.
    """
    g = _Guard(shortcuts, checker_code, goal)
    restores: list[Callable[[], None]] = []
    try:
        for cls, shortcut in g.classes:
            restores.append(_patch_class(g, cls, shortcut))
        unique = {id(ns): ns for ns in learner_globals}
        for owner, attr, fn, shortcut in g.functions:
            restores.append(_patch_function(g, owner, attr, fn, shortcut, list(unique.values())))
        if g.ops:
            with _Mode(g):
                yield g
        else:
            yield g
    finally:
        for restore in reversed(restores):
            restore()
