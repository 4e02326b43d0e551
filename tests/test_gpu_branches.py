"""The GPU branches of the accelerator chapters run on the CPU wherever the API allows.

CI has no GPU, so code that runs only under ``if torch.cuda.is_available():`` (or any other test of
the device) is never executed there; a crash in it would only show on a learner's GPU. Chapter 17 had
one. The rule these tests hold the chapters to: GPU work lives in functions that take the device as a
parameter and are also called with the CPU, so nbval executes them; what stays behind a device test is
only the call site and the few lines that need an accelerator. Those lines are checked another way:
``tests/test_api_names.py`` resolves every ``torch.*`` name and profiler field they use against the
installed torch.

Concretely, for every chapter whose ``accelerator`` is ``cuda`` in ``notebooks/chapters.yaml``:

- each branch of an ``if`` whose condition tests the device is at most ``MAX_GUARDED_LINES`` lines;
- each function the notebook defines and calls inside such a branch is also called outside every such
  branch, unless ``ACCELERATOR_ONLY`` names it with the reason it cannot run on the CPU.
"""

from __future__ import annotations

import ast
import re

import jupytext
import pytest
import yaml

from helpers.paths import NOTEBOOKS, chapter_source

CHAPTERS = yaml.safe_load((NOTEBOOKS / "chapters.yaml").read_text())
GPU_CHAPTERS = sorted(name for name, row in CHAPTERS.items() if row.get("accelerator") == "cuda")

#: A condition that tests which device is present or in use.
_DEVICE_TEST = re.compile(r"\bcuda\b|\bCUDA\b|accelerator|device\.type|device_type|has_cuda|is_available|\bmps\b|\bxpu\b")

#: The longest branch that may run only on one kind of device (chapter 18's CUDA snapshot cell is 16).
MAX_GUARDED_LINES = 20

#: Notebook functions that run only on an accelerator, with the reason none of them can run on the CPU.
ACCELERATOR_ONLY = {
    ("18_memory_optimization", "allocator_step_figures"):
        "reads the caching allocator's statistics (torch.accelerator.memory_allocated, memory_reserved, "
        "empty_cache), which exist only for accelerators",
    ("18_memory_optimization", "forward_peaks"):
        "reads the accelerator's peak-memory counter (torch.accelerator.max_memory_allocated)",
}

# Chapter 20 is tagged cuda for its CUDA kernel, which needs a GPU by nature; its CPU and C++ paths are
# tested on their own (tests/test_kernels.py), and the rule above applies to chapters 14-18 (issue 15).
RULED = [name for name in GPU_CHAPTERS if name[:2] in {"14", "15", "16", "17", "18"}]


def _code(source: str) -> ast.Module:
    return ast.parse(source)


def _notebook_code(name: str) -> str:
    cells = jupytext.read(chapter_source(name)).cells
    return "\n".join(line for cell in cells if cell.cell_type == "code"
                     for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))


def guarded_branches(tree: ast.Module) -> list[list[ast.stmt]]:
    """The bodies and else-branches of every ``if`` statement whose condition tests the device."""
    branches = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _DEVICE_TEST.search(ast.unparse(node.test)):
            branches += [part for part in (node.body, node.orelse) if part]
    return branches


def _called_names(nodes) -> list[ast.Call]:
    return [c for n in nodes for c in ast.walk(n) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)]


def branch_problems(source: str, chapter: str = "") -> list[str]:
    """What breaks the rule in ``source`` (a chapter's code), as readable lines; [] when nothing does."""
    tree = _code(source)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    branches = guarded_branches(tree)
    problems = []
    for branch in branches:
        text = ast.unparse(ast.Module(body=branch, type_ignores=[]))
        if len(text.splitlines()) > MAX_GUARDED_LINES:
            problems.append(f"line {branch[0].lineno}: a branch of {len(text.splitlines())} lines runs on one kind of "
                            f"device only (at most {MAX_GUARDED_LINES}); move its work into a function that takes the "
                            "device and call it with the CPU too")
    inside = {id(c) for branch in branches for c in _called_names(branch)}
    called_outside = {c.func.id for c in _called_names([tree]) if id(c) not in inside}
    for call in (c for branch in branches for c in _called_names(branch)):
        name = call.func.id
        if name in defined and name not in called_outside and (chapter, name) not in ACCELERATOR_ONLY:
            problems.append(f"line {call.lineno}: {name}() is called only behind a device test, so CI never runs it; "
                            "call it with the CPU device too, or add it to ACCELERATOR_ONLY with the reason")
    return sorted(set(problems))


@pytest.mark.parametrize("chapter", RULED)
def test_gpu_branches_are_small_and_their_functions_run_on_the_cpu(chapter):
    problems = branch_problems(_notebook_code(chapter), chapter)
    assert not problems, f"{chapter}:\n" + "\n".join(problems)


def test_the_accelerator_only_list_names_functions_that_exist_and_need_it():
    for (chapter, name), reason in ACCELERATOR_ONLY.items():
        tree = _code(_notebook_code(chapter))
        assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, f"{chapter} has no {name}()"
        inside = {c.func.id for branch in guarded_branches(tree) for c in _called_names(branch)}
        assert name in inside, f"{chapter}.{name}() is no longer called behind a device test: remove it from ACCELERATOR_ONLY"
        assert reason, f"{chapter}.{name}: say why it cannot run on the CPU"


def test_the_rule_covers_chapters_14_to_18():
    assert [name[:2] for name in RULED] == ["14", "15", "16", "17", "18"], RULED


def test_the_rule_can_fail():
    only_on_gpu = (
        "import torch\n"
        "def step(device):\n    return torch.ones(1, device=device)\n"
        "if torch.cuda.is_available():\n    step('cuda')\n"
    )
    assert any("step() is called only behind a device test" in p for p in branch_problems(only_on_gpu))
    also_on_cpu = only_on_gpu + "step('cpu')\n"
    assert branch_problems(also_on_cpu) == []
    long_branch = "import torch\nif device.type == 'cuda':\n" + "".join(f"    x{i} = {i}\n" for i in range(MAX_GUARDED_LINES + 1))
    assert any("runs on one kind of device only" in p for p in branch_problems(long_branch))
    else_branch = "if device.type == 'cpu':\n    pass\nelse:\n" + "".join(f"    y{i} = {i}\n" for i in range(MAX_GUARDED_LINES + 1))
    assert any("runs on one kind of device only" in p for p in branch_problems(else_branch))
