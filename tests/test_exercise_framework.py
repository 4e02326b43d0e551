"""The check framework itself: shortcut guards, tiered hints, exact types and the progress ledger."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from numpy import (
    array_split as renamed_numpy_split,  # a learner's alias of a C callable outside torch
)
from torch import cdist as renamed_cdist  # a learner's alias: must still be seen
from torch.nn.utils import clip_grad_norm_

from helpers.exercises import (
    EXERCISES,
    Hint,
    Shortcut,
    check,
    exercise,
    expect_type,
    hint,
    progress,
)


@pytest.fixture
def register(monkeypatch):
    """Register a throwaway exercise for one test; it is gone afterwards."""
    monkeypatch.setattr("helpers.exercises._load_all", lambda: None)
    added = []

    def _register(name, test, reference, **kwargs):
        exercise(name, "a task", reference, **kwargs)(test)
        added.append(name)

    yield _register
    for name in added:
        EXERCISES.pop(name, None)


def _dists_reference(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def _dists_checker(candidate):
    a, b = torch.randn(4, 3), torch.randn(5, 3)
    want = torch.cdist(a, b) ** 2  # the checker itself may use the shortcut
    assert torch.allclose(candidate(a, b), want, atol=1e-5), "wrong distances"


@pytest.fixture
def dists(register):
    register("99.dists", _dists_checker, _dists_reference, shortcuts=("torch.cdist",), goal="the pairwise distances")
    return "99.dists"


def test_a_correct_answer_passes_and_may_use_other_torch_functions(dists):
    def mine(a, b):
        return (a.unsqueeze(1) - b.unsqueeze(0)).pow(2).sum(dim=-1)

    assert check(dists, mine, show=False).passed


def test_a_named_shortcut_fails_with_a_friendly_message(dists):
    def shortcut(a, b):
        return torch.cdist(a, b) ** 2

    result = check(dists, shortcut, show=False)
    assert result.status == "failed"
    assert "write the pairwise distances yourself; `torch.cdist` does it for you" in result.message


def test_an_aliased_import_of_the_shortcut_is_seen(dists):
    def aliased(a, b):
        return renamed_cdist(a, b) ** 2

    assert "torch.cdist" in check(dists, aliased, show=False).message


def test_a_swallowed_refusal_still_fails(dists):
    def sneaky(a, b):
        try:
            return torch.cdist(a, b) ** 2
        except AssertionError:
            return ((a[:, None] - b[None]) ** 2).sum(-1)

    result = check(dists, sneaky, show=False)
    assert result.status == "failed" and "torch.cdist" in result.message


def test_the_reference_itself_is_held_to_the_shortcut_rule(register):
    register("99.bad_ref", _dists_checker, lambda a, b: torch.cdist(a, b) ** 2, shortcuts=("torch.cdist",))
    assert check("99.bad_ref", EXERCISES["99.bad_ref"].reference, show=False).status == "failed"


def test_a_tensor_method_counts_as_the_same_shortcut(register):
    def checker(candidate):
        x = torch.randn(3, 4)
        assert torch.allclose(candidate(x), torch.logsumexp(x, dim=1)), "wrong"

    register("99.lse", checker, lambda x: x.max(1).values + (x - x.max(1, keepdim=True).values).exp().sum(1).log(),
             shortcuts=("torch.logsumexp",), goal="log-sum-exp")
    assert "torch.logsumexp" in check("99.lse", lambda x: x.logsumexp(dim=1), show=False).message
    assert check("99.lse", EXERCISES["99.lse"].reference, show=False).passed


def test_a_class_shortcut_covers_its_subclasses_and_is_restored(register):
    def checker(candidate):
        w = torch.nn.Parameter(torch.ones(2))
        ref = torch.nn.Parameter(torch.ones(2))
        torch.optim.SGD([ref], lr=0.1)  # the checker may build one
        w.grad = torch.ones(2)
        ref.grad = torch.ones(2)
        candidate([w], 0.1)
        assert torch.allclose(w, torch.full((2,), 0.9)), "wrong step"

    def reference(params, lr):
        with torch.no_grad():
            for p in params:
                p -= lr * p.grad

    register("99.sgd", checker, reference, shortcuts=("torch.optim.Optimizer",), goal="the SGD step")

    def uses_the_library(params, lr):
        torch.optim.SGD(params, lr=lr).step()

    assert "torch.optim.Optimizer" in check("99.sgd", uses_the_library, show=False).message
    assert check("99.sgd", reference, show=False).passed
    assert "__new__" not in vars(torch.optim.Optimizer), "the patched __new__ must be removed"
    torch.optim.Adam([torch.nn.Parameter(torch.ones(1))], lr=1.0)  # and optimizers still build


def test_a_python_function_shortcut_imported_by_name_is_seen_and_restored(register):
    def checker(candidate):
        p = torch.nn.Parameter(torch.ones(4))
        p.grad = torch.full((4,), 3.0)
        candidate([p], 1.0)
        assert torch.allclose(p.grad.norm(), torch.tensor(1.0)), "the norm should be 1"

    def reference(params, max_norm):
        total = torch.sqrt(sum((p.grad**2).sum() for p in params))
        for p in params:
            p.grad.mul_(min(1.0, max_norm / (float(total) + 1e-6)))

    register("99.clip", checker, reference, shortcuts=("torch.nn.utils.clip_grad_norm_",), goal="gradient clipping")
    assert "clip_grad_norm_" in check("99.clip", lambda ps, m: clip_grad_norm_(ps, m), show=False).message
    assert globals()["clip_grad_norm_"] is torch.nn.utils.clip_grad.clip_grad_norm_, "the learner's name must be restored"
    assert torch.nn.utils.clip_grad_norm_ is torch.nn.utils.clip_grad.clip_grad_norm_
    assert check("99.clip", reference, show=False).passed


def test_a_library_using_the_shortcut_internally_is_not_blamed(register):
    def checker(candidate):
        assert isinstance(candidate(), torch.nn.Linear), "return a Linear"

    register("99.init", checker, lambda: torch.nn.Linear(3, 3), shortcuts=("torch.nn.init.kaiming_uniform_",))
    # nn.Linear's constructor calls kaiming_uniform_ itself: that is not the learner's shortcut
    assert check("99.init", lambda: torch.nn.Linear(3, 3), show=False).passed

    def direct():
        layer = torch.nn.Linear(3, 3)
        torch.nn.init.kaiming_uniform_(layer.weight)
        return layer

    assert "kaiming_uniform_" in check("99.init", direct, show=False).message


def test_a_conditional_shortcut_forbids_only_the_named_use(register):
    def checker(candidate):
        q = torch.randn(1, 4, 3, 8)
        k = v = torch.randn(1, 2, 3, 8)
        assert candidate(q, k, v).shape == (1, 4, 3, 8), "wrong shape"

    def reference(q, k, v):
        rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1))

    register("99.gqa", checker, reference, shortcuts=(
        Shortcut("torch.nn.functional.scaled_dot_product_attention", when=lambda a, k: k.get("enable_gqa"),
                 does="`scaled_dot_product_attention(enable_gqa=True)`"),), goal="the key/value head sharing")
    assert check("99.gqa", reference, show=False).passed
    result = check("99.gqa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), show=False)
    assert "enable_gqa=True" in result.message


def test_patches_are_restored_when_the_answer_crashes(dists):
    before = torch.optim.Optimizer.__dict__.get("__new__")

    def crash(a, b):
        raise ValueError("boom")

    assert "ValueError: boom" in check(dists, crash, show=False).message
    assert torch.optim.Optimizer.__dict__.get("__new__") is before
    assert torch.cdist(torch.zeros(1, 1), torch.ones(1, 1)).item() == 1.0  # no mode left active


def test_an_unknown_shortcut_is_refused_at_registration():
    with pytest.raises(ValueError, match="torch.no_such_function"):
        exercise("99.unknown", "t", lambda: None, shortcuts=("torch.no_such_function",))


def test_an_aten_packet_stands_for_its_overloads(register):
    def checker(candidate):
        x = torch.randn(3, 4)
        assert torch.allclose(candidate(x), torch.logsumexp(x, dim=1)), "wrong"

    register("99.lse_aten", checker, lambda x: x.max(1).values + (x - x.max(1, keepdim=True).values).exp().sum(1).log(),
             shortcuts=("torch.ops.aten.logsumexp",), goal="log-sum-exp")
    assert "`torch.ops.aten.logsumexp` does" in check("99.lse_aten", lambda x: torch.ops.aten.logsumexp(x, [1]),
                                                      show=False).message
    assert "`torch.ops.aten.logsumexp.default` does" in check(
        "99.lse_aten", lambda x: torch.ops.aten.logsumexp.default(x, [1]), show=False).message
    assert check("99.lse_aten", EXERCISES["99.lse_aten"].reference, show=False).passed


def test_a_reached_operator_is_refused_through_any_torch_function_but_not_for_the_checker(register):
    def checker(candidate):
        x = torch.randn(3, 4, dtype=torch.float64)
        want = torch.distributions.Categorical(logits=x).probs  # the checker may reach it through torch
        assert torch.allclose(candidate(x), want), "wrong"

    def reference(x):
        e = (x - x.amax(1, keepdim=True)).exp()
        return e / e.sum(1, keepdim=True)

    register("99.reached", checker, reference, shortcuts=(Shortcut("torch.ops.aten._softmax", reached=True),),
             goal="softmax")
    assert check("99.reached", reference, show=False).passed
    message = check("99.reached", lambda x: torch.distributions.Categorical(logits=x).probs, show=False).message
    assert "`torch.ops.aten._softmax.default`, which your code reached through `torch.distributions`" in message
    direct = check("99.reached", lambda x: torch.ops.aten._softmax.default(x, 1, False), show=False).message
    assert "`torch.ops.aten._softmax.default` does it for you" in direct, direct  # a direct call: named as such
    assert torch.allclose(torch.softmax(torch.zeros(1, 2), 1), torch.full((1, 2), 0.5))  # no mode left active
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None, "the dispatch mode must be gone after the check"


def test_reached_needs_an_aten_operator():
    with pytest.raises(ValueError, match="reached=True needs an ATen operator"):
        exercise("99.bad_reached", "t", lambda: None, shortcuts=(Shortcut("torch.softmax", reached=True),))


def test_hints_come_in_two_tiers(register):
    def checker(candidate):
        got = candidate()
        if got != 3:
            raise Hint(f"for the case x=1 the result should be 3, got {got}", "add 2, do not multiply by 3")

    register("99.tiers", checker, lambda: 3)
    first = check("99.tiers", lambda: 4, show=False).message
    assert "should be 3, got 4" in first and "add 2" not in first and 'hint("99.tiers")' in first
    assert hint("99.tiers", show=False) == "add 2, do not multiply by 3"
    second = check("99.tiers", lambda: 5, show=False).message
    assert "got 5" in second and "add 2" in second


def test_hint_without_a_general_hint_says_what_to_do_before_and_after_a_check(register):
    def checker(candidate):
        assert candidate() == 3, "for the case x=1 the result should be 3"

    register("99.no_general_hint", checker, lambda: 3)
    before = hint("99.no_general_hint", show=False)
    assert "run its check first" in before and "the case the check names" not in before
    check("99.no_general_hint", lambda: 4, show=False)
    after = hint("99.no_general_hint", show=False)
    assert "already says all it knows" in after and "run its check first" not in after


def test_expect_type_names_what_it_got():
    expect_type(1.5, float)
    with pytest.raises(Hint, match="Python float, got Tensor") as info:
        expect_type(torch.tensor(1.5), float, "the loss")
    assert ".item()" in info.value.more
    with pytest.raises(Hint, match="Python int, got bool"):
        expect_type(True, int)
    expect_type(3, int)


# -- the progress ledger ------------------------------------------------------


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("COURSE_PROGRESS_LEDGER", str(path))
    return path


def test_each_check_appends_its_verdict_and_never_the_code(dists, ledger):
    def secret_answer(a, b):
        return ((a[:, None] - b[None]) ** 2).sum(-1)

    check(dists, secret_answer, show=False)
    check(dists, lambda a, b: torch.cdist(a, b), show=False)
    entries = progress.read(ledger)
    assert [(e["exercise"], e["status"]) for e in entries] == [(dists, "passed"), (dists, "failed")]
    assert "secret_answer" not in ledger.read_text() and set(entries[0]) == {"exercise", "status", "time"}


def test_a_corrupt_ledger_loses_only_its_bad_lines(ledger):
    progress.record("05.a", "passed")
    with open(ledger, "ab") as fh:
        fh.write(b'{"exercise": "05.b", "sta')  # a kernel killed mid-write
    progress.record("05.c", "failed")  # must start on a fresh line
    with open(ledger, "ab") as fh:
        fh.write(b"\xff\xfe not json\n")
    progress.record("06.a", "passed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entries = progress.read(ledger)
    assert [e["exercise"] for e in entries] == ["05.a", "05.c", "06.a"]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "line 2" in messages[0] and "line 4" in messages[1]


def test_recording_never_raises(tmp_path, monkeypatch):
    blocked = tmp_path / "a_folder"
    blocked.mkdir()
    monkeypatch.setenv("COURSE_PROGRESS_LEDGER", str(blocked))  # a folder cannot be appended to
    with pytest.warns(progress.LedgerWarning, match="could not record progress"):
        progress.record("05.a", "passed")


def test_summary_counts_attempted_passed_and_untried():
    entries = [
        {"exercise": "05.a", "status": "failed"},
        {"exercise": "05.a", "status": "passed"},
        {"exercise": "05.b", "status": "failed"},
        {"exercise": "05.c", "status": "not attempted"},
        {"exercise": "06.a", "status": "passed"},
        {"exercise": "06.a", "status": "failed"},  # passed once: still passed
    ]
    table = progress.summary(entries, ["05.a", "05.b", "05.c", "06.a", "07.a"])
    assert table["05"] == {"exercises": 3, "attempted": 2, "passed": 1, "not yet tried": 1}
    assert table["06"] == {"exercises": 1, "attempted": 1, "passed": 1, "not yet tried": 0}
    assert table["07"] == {"exercises": 1, "attempted": 0, "passed": 0, "not yet tried": 1}


def test_make_progress_prints_a_table_per_chapter(ledger, capsys):
    ledger.write_text(json.dumps({"exercise": "01.one_hot", "status": "passed", "time": "t"}) + "\n{broken\n")
    assert progress.main([]) == 0
    out, err = capsys.readouterr()
    row = next(line for line in out.splitlines() if line.startswith("| 01 "))
    assert row.split("|")[3].strip() == "1" and row.split("|")[4].strip() == "1"
    assert "line 2 is corrupt" in err


def test_the_shortcut_itself_passed_as_the_answer_fails(dists):
    import functools

    assert "torch.cdist" in check(dists, torch.cdist, show=False).message
    assert "torch.cdist" in check(dists, functools.partial(torch.cdist, p=2.0), show=False).message


def _fake_package(monkeypatch, name):
    """A made-up slow-to-import package: it enters sys.modules only when `install()` is called."""
    import sys
    import types

    package = types.ModuleType(name)

    def add_one(x):
        return x + 1

    add_one.__module__ = name
    package.add_one = add_one
    monkeypatch.delitem(sys.modules, name, raising=False)
    return package, lambda: monkeypatch.setitem(sys.modules, name, package)


def test_a_lazy_shortcut_is_resolved_only_once_its_package_is_imported(register, monkeypatch):
    import sys

    package, install = _fake_package(monkeypatch, "course_fake_lazy_pkg")

    def checker(candidate):
        assert candidate(1) == 2, "add one"

    # registration neither imports nor validates it (a missing package would raise otherwise)
    register("99.lazy", checker, lambda x: x + 1, shortcuts=(Shortcut("course_fake_lazy_pkg.add_one", lazy=True),),
             goal="the adding")
    assert "course_fake_lazy_pkg" not in sys.modules
    assert check("99.lazy", lambda x: x + 1, show=False).passed  # the guard skipped it, and nothing broke
    install()  # a learner who imported the package
    assert "course_fake_lazy_pkg.add_one" in check("99.lazy", lambda x: package.add_one(x), show=False).message
    assert package.add_one(1) == 2 and package.add_one.__name__ == "add_one", "the patch was not restored"


def test_a_lazy_shortcut_imported_inside_the_answer_is_still_caught(register, monkeypatch):
    package, install = _fake_package(monkeypatch, "course_fake_lazy_pkg2")
    register("99.lazy2", lambda c: None if c(1) == 2 else pytest.fail("add one"), lambda x: x + 1,
             shortcuts=(Shortcut("course_fake_lazy_pkg2.add_one", lazy=True),), goal="the adding")

    def imports_then_calls(x):
        install()  # `import course_fake_lazy_pkg2` inside the answer: not guarded on the first run
        return package.add_one(x)

    result = check("99.lazy2", imports_then_calls, show=False)
    assert result.status == "failed" and "course_fake_lazy_pkg2.add_one" in result.message, result.message


def test_a_c_callable_outside_torch_is_refused_by_name_and_restored(register):
    """numpy.array_split is a NumPy dispatcher object, which no torch mode sees: it is rebound by name."""
    def checker(candidate):
        blocks = candidate(10, 3)
        assert [len(b) for b in blocks] == [4, 3, 3], "blocks of 4, 3 and 3"

    def reference(n, k):
        sizes = [n // k + (i < n % k) for i in range(k)]
        starts = [sum(sizes[:i]) for i in range(k)]
        return [list(range(s, s + z)) for s, z in zip(starts, sizes, strict=True)]

    register("99.split", checker, reference, shortcuts=("numpy.array_split",), goal="the split")
    original = np.array_split
    assert "numpy.array_split" in check("99.split", lambda n, k: np.array_split(np.arange(n), k), show=False).message
    assert "numpy.array_split" in check("99.split", lambda n, k: renamed_numpy_split(np.arange(n), k), show=False).message
    def answer_with_a_local_import():
        from numpy import array_split as local_split  # a closure variable of the answer below

        return lambda n, k: local_split(np.arange(n), k)

    assert "numpy.array_split" in check("99.split", answer_with_a_local_import(), show=False).message
    # numpy.split does the split through numpy's own import of array_split: a library route is the learner's too
    assert "numpy.array_split" in check("99.split", lambda n, k: np.split(np.arange(n), [4, 7]), show=False).message
    assert np.array_split is original and renamed_numpy_split is original, "the names must be restored"
    assert check("99.split", reference, show=False).passed


def test_a_tensor_method_named_on_its_own_keeps_its_message_whatever_the_order(register):
    def checker(candidate):
        assert torch.allclose(candidate(torch.ones(2, 3)), torch.full((2,), 3.0).log() + 1), "wrong"

    register("99.lse", checker, lambda x: (x.exp().sum(-1)).log(), goal="the log-sum-exp",
             shortcuts=(Shortcut("torch.Tensor.logsumexp", does="`Tensor.logsumexp`"),
                        Shortcut("torch.logsumexp", does="`torch.logsumexp`")))
    assert "`Tensor.logsumexp`" in check("99.lse", lambda x: x.logsumexp(-1), show=False).message
    assert "`torch.logsumexp`" in check("99.lse", lambda x: torch.logsumexp(x, -1), show=False).message
