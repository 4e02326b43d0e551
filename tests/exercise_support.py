"""What the per-chapter exercise tests share.

The generic checks (every reference passes, every stub reads "not attempted")
live in tests/test_exercises.py; the chapter files only add wrong answers.
"""

from __future__ import annotations

from helpers.exercises import ExerciseResult, check


def assert_rejected(name: str, candidate, *hint_words: str) -> ExerciseResult:
    """Assert that exercise ``name`` fails ``candidate`` with a hint naming each of ``hint_words``."""
    result = check(name, candidate, show=False)
    assert result.status == "failed", f"{name} accepted a wrong answer: {result}"
    for word in hint_words:
        assert word in result.message, f"hint for {name} should mention {word!r}: {result.message}"
    return result
