"""Every exercise: its reference passes, a stub reads "not attempted", a crash is reported.

Wrong answers that each checker must reject are in tests/test_exercises_chNN*.py.
"""

from __future__ import annotations

import re

import pytest
import torch

from helpers.authoring import sources
from helpers.exercises import EXERCISES, _load_all, check, solution

_load_all()
NAMES = sorted(EXERCISES)


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_passes(name):
    result = check(name, solution(name), show=False)
    assert result.passed, result.message


@pytest.mark.parametrize("name", NAMES)
def test_every_exercise_has_a_general_hint_that_names_no_shortcut(name):
    """hint(name) before any check must help (tier 2 of the tiered hints), and never point at a refused call."""
    ex = EXERCISES[name]
    assert ex.hint and len(ex.hint) > 40, f"{name} has no general hint (hint= of @exercise)"
    for item in ex.shortcuts:
        path = getattr(item, "name", item)
        last = path.rsplit(".", 1)[-1].rstrip("*")
        if last and last not in {"", "data"}:
            assert f"{last}(" not in ex.hint and f"`{last}`" not in ex.hint and f" {path}" not in ex.hint, (
                f"{name}'s general hint names the refused {path}")


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_attempted(name):
    assert check(name, _stub, show=False).status == "not attempted"


@pytest.mark.parametrize("name", NAMES)
def test_crashing_answer_fails_with_its_error(name):
    def crash(*args, **kwargs):
        raise ZeroDivisionError("boom")

    result = check(name, crash, show=False)
    assert result.status == "failed" and "ZeroDivisionError: boom" in result.message


def test_unknown_exercise():
    with pytest.raises(KeyError, match="unknown exercise"):
        check("99.nothing", _stub)


@pytest.mark.parametrize("py", sources(), ids=lambda p: p.stem)
def test_each_chapter_has_two_checked_exercises(py):
    chapter = py.stem[:2]
    mine = [n for n in NAMES if n.startswith(chapter + ".")]
    assert len(mine) >= 2, f"{py.stem} has {len(mine)} exercises; the anatomy asks for at least two"
    text = py.read_text(encoding="utf-8")
    for name in mine:
        assert re.search(rf'check\(\s*"{re.escape(name)}"', text), f"{py.name} never checks exercise {name}"


@pytest.mark.parametrize("name", NAMES)
def test_library_not_implemented_error_is_not_mistaken_for_a_stub(name):
    def calls_unimplemented(*args, **kwargs):
        import torch

        return torch.nn.Module()(1)  # nn.Module without forward raises NotImplementedError inside torch

    result = check(name, calls_unimplemented, show=False)
    assert result.status == "failed" and "inside a library" in result.message
    assert "calls_unimplemented" in result.message, "the message should point at the learner's own line"


def test_not_implemented_error_from_a_kernel_called_on_the_learners_line_is_not_a_stub():
    import torch

    def kernel_without_cpu(*args, **kwargs):  # torch._masked_scale has no CPU kernel: the C++ error surfaces here
        return torch._masked_scale(torch.ones(3), torch.ones(3, dtype=torch.bool), 2.0)

    result = check("01.softmax", kernel_without_cpu, show=False)
    assert result.status == "failed" and "inside a library" in result.message, result


def test_stub_class_defined_without_a_source_file_is_not_attempted():
    namespace: dict = {}
    exec(compile("class Stub:\n    def __init__(self, *a, **k):\n        raise NotImplementedError\n", "<cell>", "exec"), namespace)
    assert check(NAMES[0], namespace["Stub"], show=False).status == "not attempted"


@pytest.mark.parametrize("name", NAMES)
def test_checker_leaves_the_global_torch_rng_alone(name):
    torch.manual_seed(2024)
    expected = torch.rand(4)
    torch.manual_seed(2024)
    assert check(name, solution(name), show=False).passed
    assert torch.equal(torch.rand(4), expected), f"checking {name} moved torch's global random stream"
