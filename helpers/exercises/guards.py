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
- **Python functions** (``clip_grad_norm_``, ``torch.autograd.functional.*``),
  and callables written in C outside torch (``numpy.array_split``, which no
  torch mode sees), by temporarily rebinding every name that holds them: in
  every loaded module (so a private alias or a library's own import is covered
  too), in the learner's globals and in the answer's closure. A call from
  inside torch is torch calling itself; a call from inside another package
  (Lightning's ``Fabric.seed_everything``) counts as the learner's, since that
  package did the work for them;
- **ATen operators** (``torch.ops.aten._softmax``): an overload packet stands for
  itself and every overload (``torch.ops.aten._softmax.default``), seen by the
  torch-function mode like any torch operator. With ``Shortcut(..., reached=True)``
  a :class:`~torch.utils._python_dispatch.TorchDispatchMode` also sees the
  operator one level down, whichever torch function issued it: then
  ``torch.distributions.Categorical(logits=x).probs``, which reaches
  ``aten._softmax`` through ``F.softmax`` inside torch, counts as the learner's
  softmax.

"Direct" means the first frame above the call that is not plumbing (this
module, ``torch.overrides``, the ``torch.ops`` call wrappers, the function's own wrapper, ``functools``,
the handler of a torch-function or dispatch mode) is neither inside ``torch`` nor one of the checker's own
functions. "Reached" (``reached=True``) skips the frames inside ``torch`` as well: the operator is the
learner's when the first frame outside torch and the plumbing is not the checker's. A library may still use
the operator for the checker (the checker's own ``torch.softmax`` to compute the expected answer is allowed).

**Lazy shortcuts** (``Shortcut(name, lazy=True)``) name functions of packages that are slow
to import (``lightning`` takes seconds). Such a name is resolved only when its top-level
package is already in ``sys.modules`` as the guard starts: a learner who never imported the
package cannot be calling it, and nothing is imported at registration. A learner who imports
the package *inside* the answer is caught too: :func:`lazy_pending` lists the lazy shortcuts
skipped, and :func:`helpers.exercises.check` runs the checker once more, guarded, when one of
their packages appeared during the check.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import CodeType, FunctionType, ModuleType

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Shortcut", "ShortcutUsed", "guard", "lazy_pending"]

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_THIS_FILE = str(Path(__file__).resolve())
_TORCH_PLUMBING = ("torch/overrides.py", "torch/utils/_python_dispatch.py", "torch/_ops.py")  # _ops: torch.ops.aten.* call wrappers
_PLUMBING = {_THIS_FILE, str(Path(functools.__file__).resolve()), str(Path(inspect.__file__).resolve())}
_MODE_HANDLERS = {"__torch_function__", "__torch_dispatch__"}  # a (checker's) mode passing an operator on
_MODE_WRAPPERS = ("torch/_compile.py", "torch/_dynamo/eval_frame.py")  # around every mode's __torch_dispatch__


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
        reached: for an ATen operator (``torch.ops.aten.NAME``, or one overload of it): refuse it also
            when the learner's code reaches it through other torch functions, not only by a direct
            call (seen at dispatch level, below every Python wrapper). Name the operator that really
            runs: a composite one such as ``aten.softmax`` is decomposed before dispatch, into ``aten._softmax``.
    """

    name: str
    when: Callable[[tuple, dict], bool] | None = None
    does: str = ""
    reached: bool = False
    lazy: bool = False  # resolve only once the name's top-level package is imported (see the module docstring)

    @property
    def package(self) -> str:
        """The top-level package of the name (``"lightning"`` for ``"lightning.pytorch.seed_everything"``)."""
        return self.name.split(".", 1)[0]


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


def lazy_pending(shortcuts: Iterable[str | Shortcut]) -> list[Shortcut]:
    """The lazy shortcuts among ``shortcuts`` whose package is not imported yet (so not guarded now)."""
    return [s for s in map(_as_shortcut, shortcuts) if s.lazy and s.package not in sys.modules]


def _expand(shortcut: Shortcut) -> Iterator[tuple[Shortcut, object, str, object]]:
    """The objects a shortcut names: a ``.*`` module's functions, an ATen overload packet and its overloads.

    Raises:
        ValueError: the name names nothing, or ``reached=True`` names something other than an ATen operator.
    """
    if shortcut.lazy and shortcut.package not in sys.modules:
        return  # not imported, so not called; resolving it would import it (seconds for lightning)
    if shortcut.name.endswith(".*"):
        module = importlib.import_module(shortcut.name[:-2])
        for attr, obj in vars(module).items():
            if not attr.startswith("_") and isinstance(obj, FunctionType) and obj.__module__ == module.__name__:
                yield dataclasses.replace(shortcut, name=f"{module.__name__}.{attr}"), module, attr, obj
        return
    owner, attr, obj = _resolve(shortcut.name)
    if shortcut.reached and not isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        raise ValueError(f"shortcut {shortcut.name!r}: reached=True needs an ATen operator (torch.ops.aten.NAME)")
    yield shortcut, owner, attr, obj
    if isinstance(obj, torch._ops.OpOverloadPacket):  # torch.ops.aten.cdist stands for cdist.default, ... too
        for overload in obj.overloads():
            yield replace(shortcut, name=f"{shortcut.name}.{overload}"), obj, overload, getattr(obj, overload)


class _Guard:
    def __init__(self, shortcuts: Iterable[str | Shortcut], checker_code: Callable[[CodeType], bool], goal: str):
        self.goal = goal
        self.is_checker = checker_code
        self.used: list[str] = []
        self.ops: dict[object, Shortcut] = {}  # torch operators, seen by the mode
        self.classes: list[tuple[type, Shortcut]] = []
        self.functions: list[tuple[object, str, Callable, Shortcut]] = []
        self.reached: dict[torch._ops.OpOverload, Shortcut] = {}  # ATen overloads, seen by the dispatch mode
        same_name_methods: dict[object, Shortcut] = {}
        for item in shortcuts:
            for shortcut, owner, attr, obj in _expand(_as_shortcut(item)):
                if shortcut.reached and isinstance(obj, torch._ops.OpOverload):
                    self.reached.setdefault(obj, shortcut)
                if isinstance(obj, type):
                    self.classes.append((obj, shortcut))
                elif isinstance(obj, FunctionType) and not _torch_function_aware(obj):
                    self.functions.append((owner, attr, obj, shortcut))
                elif not _seen_by_torch_function_mode(owner, obj):
                    # a callable written in C outside torch (numpy.array_split, math.prod): rebound by name
                    self.functions.append((owner, attr, obj, shortcut))
                else:  # a builtin operator, or a Python function that dispatches __torch_function__
                    self.ops[obj] = shortcut
                    # torch.logsumexp and Tensor.logsumexp are one shortcut
                    is_torch_module = isinstance(owner, ModuleType) and owner.__name__.startswith("torch")
                    method = getattr(torch.Tensor, attr, None) if is_torch_module else None
                    if method is not None:
                        same_name_methods.setdefault(method, shortcut)
        # A Tensor method named by a shortcut of its own keeps that shortcut (and its message), whatever
        # the order of the list: F.unfold does not take over Tensor.unfold.
        for method, shortcut in same_name_methods.items():
            self.ops.setdefault(method, shortcut)

    # -- who called? ------------------------------------------------------
    def learner_called(self, skip: CodeType | set[CodeType] | None = None) -> bool:
        """Is the nearest caller that is not plumbing (nor ``skip``) the learner's code?

        A caller inside torch is torch calling itself. A caller inside another package counts as
        the learner's: a learner who calls ``numpy.split`` or Lightning's ``Fabric.seed_everything``
        has reached the named function through a library that does the work for them.
        """
        skip_codes = skip if isinstance(skip, set) else {skip}
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            filename = code.co_filename
            if _is_plumbing(code) or code in skip_codes:
                frame = frame.f_back
                continue
            if filename.startswith(_TORCH_DIR):
                return False  # torch calling itself
            return not self.is_checker(code)
        return False

    def learner_reached(self) -> tuple[bool, str]:
        """Is the nearest caller outside torch and the plumbing the learner's code, and through what?

        Returns (whether it is the learner's, what the learner's code called: the torch module of
        the outermost Python frame inside torch, such as ```torch.distributions```, or "another torch
        function" when it called a C++ one, such as ``F.scaled_dot_product_attention``).
        """
        frame = sys._getframe(1)
        through = "another torch function"
        while frame is not None:
            code = frame.f_code
            if _is_plumbing(code):
                frame = frame.f_back
                continue
            if code.co_filename.startswith(_TORCH_DIR):
                if not code.co_filename.endswith(_MODE_WRAPPERS):  # the last one kept is what the caller called
                    through = f"`{_torch_module(code.co_filename)}`"
                frame = frame.f_back
                continue
            return (not self.is_checker(code)), through
        return False, through

    def refuse(self, shortcut: Shortcut, through: str = "") -> None:
        self.used.append(shortcut.name)
        does = shortcut.does or f"`{shortcut.name}`"
        if through:
            does += f", which your code reached through {through},"
        raise ShortcutUsed(f"this exercise asks you to write {self.goal} yourself; {does} does it for you.")

    def wants(self, shortcut: Shortcut, args: tuple, kwargs: dict) -> bool:
        return shortcut.when is None or bool(shortcut.when(args, kwargs or {}))


def _is_plumbing(code: CodeType) -> bool:
    filename = code.co_filename
    return filename in _PLUMBING or filename.endswith(_TORCH_PLUMBING) or code.co_name in _MODE_HANDLERS


def _torch_module(filename: str) -> str:
    """``.../torch/distributions/utils.py`` -> ``"torch.distributions"``; ``.../torch/functional.py`` -> ``"torch.functional"``."""
    parts = Path(filename).resolve().relative_to(_TORCH_DIR).with_suffix("").parts
    return ".".join(("torch", *parts[:1])) if parts and parts[0] != "__init__" else "torch"


def _seen_by_torch_function_mode(owner: object, obj: object) -> bool:
    """Does a TorchFunctionMode see calls of ``obj``? Only torch's own operators and Tensor methods."""
    if isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return True
    home = owner.__name__ if isinstance(owner, ModuleType) else getattr(owner, "__module__", "") or ""
    return home == "torch" or home.startswith("torch.")


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


class _DispatchMode(TorchDispatchMode):
    """Sees the ATen overloads named with ``reached=True``, whichever torch function issued them."""

    def __init__(self, guard: _Guard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        shortcut = self.guard.reached.get(func)
        if shortcut is not None and self.guard.wants(shortcut, args, kwargs):
            learner, through = self.guard.learner_reached()
            if learner:
                self.guard.refuse(shortcut, through)
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


def _cell_holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


def _wrap_function(guard: _Guard, fn: Callable, shortcut: Shortcut) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if guard.wants(shortcut, args, kwargs) and guard.learner_called(getattr(fn, "__code__", None)):
            guard.refuse(shortcut)
        return fn(*args, **kwargs)

    return wrapper


def _patch_functions(guard: _Guard, learner_namespaces: list[dict], cells: list) -> Callable[[], None]:
    """Rebind every named function, wherever a loaded module (or the learner) holds it, to its guard.

    One pass over the namespaces of all loaded modules, so a function is seen however it is
    reached: under its public name (``torch.func.grad``), its defining module's name
    (``torch._functorch.apis.grad``), or a library's own import of it (Lightning's
    ``Fabric.seed_everything`` calls the ``seed_everything`` its module imported).
    """
    wrappers: dict[int, tuple[Callable, Callable]] = {}
    owners: list[dict] = []
    for owner, _attr, fn, shortcut in guard.functions:
        wrappers.setdefault(id(fn), (fn, _wrap_function(guard, fn, shortcut)))
        if isinstance(owner, (ModuleType, type)):
            owners.append(vars(owner))
    namespaces = {id(ns): ns for ns in owners}
    for module in list(sys.modules.values()):
        ns = getattr(module, "__dict__", None)
        if isinstance(ns, dict):
            namespaces.setdefault(id(ns), ns)
    for ns in learner_namespaces:
        namespaces.setdefault(id(ns), ns)
    rebound: list[tuple[object, str, Callable, Callable]] = []
    for ns in namespaces.values():
        for name, value in list(ns.items()):
            pair = wrappers.get(id(value))
            if pair is not None and pair[0] is value:
                try:
                    ns[name] = pair[1]
                except TypeError:  # a class's mappingproxy
                    continue
                rebound.append((ns, name, *pair))
    for owner, attr, fn, _shortcut in guard.functions:  # a class attribute (its __dict__ is read-only)
        if isinstance(owner, type) and owner.__dict__.get(attr) is fn:
            setattr(owner, attr, wrappers[id(fn)][1])
            rebound.append((owner, attr, fn, wrappers[id(fn)][1]))
    held = []
    for cell in cells:  # imported by name inside a function that encloses the answer
        try:
            pair = wrappers.get(id(cell.cell_contents))
        except ValueError:  # an empty cell
            continue
        if pair is not None and pair[0] is cell.cell_contents:
            cell.cell_contents = pair[1]
            held.append((cell, *pair))

    def restore() -> None:
        for where, name, fn, wrapper in rebound:
            if isinstance(where, dict):
                if where.get(name) is wrapper:
                    where[name] = fn
            elif where.__dict__.get(name) is wrapper:
                setattr(where, name, fn)
        for cell, fn, wrapper in held:
            if _cell_holds(cell, wrapper):
                cell.cell_contents = fn

    return restore


@contextmanager
def guard(shortcuts: Iterable[str | Shortcut], *, goal: str, checker_code: Callable[[CodeType], bool],
          learner_globals: Iterable[dict] = (), learner_cells: Iterable = ()) -> Iterator[_Guard]:
    """Refuse direct calls of ``shortcuts`` from the learner's code inside the block.

    Args:
        shortcuts: dotted names or :class:`Shortcut` s.
        goal: what the learner is asked to write, for the message ("the pairwise distances").
        checker_code: true for the code objects of the checker itself (its calls are allowed).
        learner_globals: namespaces where the learner may have imported a function by name
            (the candidate's ``__globals__``, the notebook's ``__main__``).
        learner_cells: the closure cells of the answer (a name imported inside the function
            that defines it); a cell holding a named Python function is rebound too.

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
        if g.functions:
            restores.append(_patch_functions(g, list(learner_globals), list(learner_cells)))
        with ExitStack() as modes:
            if g.ops:
                modes.enter_context(_Mode(g))
            if g.reached:
                modes.enter_context(_DispatchMode(g))
            yield g
    finally:
        for restore in reversed(restores):
            restore()
