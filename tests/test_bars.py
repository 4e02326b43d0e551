"""helpers.bars: progress bars for learners, none in stored outputs, and solutions that a teacher can hide."""

from __future__ import annotations

import pytest

from helpers import bars
from helpers.exercises import solution


def test_bars_are_off_when_the_runners_say_so(monkeypatch):
    monkeypatch.setenv(bars.ENV, "0")
    items = [1, 2, 3]
    assert bars.bar(items, desc="x") is items and not bars.enabled()
    bars.elapsed_bar("job").update(1)  # a do-nothing bar


def test_bars_are_transient_tqdm_bars_otherwise(monkeypatch):
    from tqdm.auto import tqdm

    monkeypatch.delenv(bars.ENV, raising=False)
    shown = bars.bar(range(3), desc="epochs", unit="epoch")
    assert isinstance(shown, tqdm) and shown.leave is False and list(shown) == [0, 1, 2]
    bars.off_in_children()  # writes os.environ (monkeypatch restores it after the test)
    assert bars.os.environ[bars.ENV] == "0" and not bars.enabled()


def test_the_test_suite_runs_with_bars_off():
    assert not bars.enabled(), "conftest.py must set COURSE_PROGRESS_BARS=0 for the kernels nbval and papermill start"


def test_a_teacher_can_hide_the_solutions(monkeypatch):
    monkeypatch.delenv("COURSE_HIDE_SOLUTIONS", raising=False)
    assert callable(solution("05.train_step"))
    monkeypatch.setenv("COURSE_HIDE_SOLUTIONS", "1")
    with pytest.raises(PermissionError, match=r"hidden .* check\('05.train_step', \.\.\.\) and hint"):
        solution("05.train_step")
    with pytest.raises(KeyError):
        solution("05.no_such_exercise")  # an unknown name is still a KeyError, hidden or not
