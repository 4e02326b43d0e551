"""Checks for "no Python loops": read the answer's source, and count the operators it issues.

Two complementary tests, for exercises that ask for broadcasting or indexing instead of a loop:
:func:`python_loop` finds a loop written in the answer itself; :func:`ops_issued` counts the ATen
operators a call issues, which stays the same for a vectorised answer whatever the input sizes,
and grows with them for a loop hidden anywhere in what the answer calls.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["ops_issued", "python_loop"]

_LOOP_NODES = {
    ast.For: "a `for` loop", ast.AsyncFor: "a `for` loop", ast.While: "a `while` loop",
    ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
}


def python_loop(fn: Callable) -> str | None:
    """Describe the first Python loop in ``fn``'s own source, e.g. "a `for` loop (line 3 of pairwise_sq_dists)".

    Looks at ``for``/``while`` statements and comprehensions, in ``fn`` and the functions
    nested in it (not in functions it calls: :func:`ops_issued` covers those). For a lambda
    only the lambda's own expression counts. Returns None when there is no loop, and also
    when the source cannot be read or parsed (a function built with ``exec``, a lambda cut
    out of a longer statement), so that the check never fails an answer for lack of source.
    """
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    roots = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)] if fn.__name__ == "<lambda>" else [tree]
    for root in roots:
        for node in ast.walk(root):
            if type(node) in _LOOP_NODES:
                return f"{_LOOP_NODES[type(node)]} (line {node.lineno} of {fn.__name__})"
    return None


class _OpCounter(TorchDispatchMode):
    """Counts the ATen operators (PyTorch's basic operations) issued while it is active.

    A dispatch mode sees each operator once, at the level below Python: the operators one
    operator calls internally are not counted again, and the shortcut guard of
    :mod:`helpers.exercises.guards` (a torch-function mode, one level up) is not disturbed.
    """

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def ops_issued(fn: Callable, *args) -> int:
    """The number of ATen operators ``fn(*args)`` issues.

    A vectorised answer issues the same number whatever the sizes of its inputs; a Python
    loop over rows (in ``fn`` or in anything it calls) issues more for more rows.
    """
    with _OpCounter() as counter:
        fn(*args)
    return counter.count
