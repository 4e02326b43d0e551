"""helpers/serve_exported.py: chapter 22's fresh-process server answers with the model's logits."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import helpers.serve_exported as serve

SCRIPT = Path(serve.__file__)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny MNIST-shaped model, exported with a dynamic batch and saved as .pt2."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (torch.randn(2, 1, 28, 28),), dynamic_shapes=({0: batch},))
    path = tmp_path_factory.mktemp("serve") / "tiny.pt2"
    torch.export.save(program, path)
    return model, path


def test_needs_an_artefact():
    with pytest.raises(SystemExit) as exc:
        serve.main([])
    assert exc.value.code == 2


def test_isolated_process_answers_every_request_with_the_models_logits(exported):
    model, path = exported
    images = [torch.randn(n, 784) for n in (1, 3)]
    stdin = "".join(json.dumps({"id": f"r{i}", "images": x.tolist()}) + "\n" for i, x in enumerate(images))
    done = subprocess.run([sys.executable, "-I", str(SCRIPT), "--pt2", str(path)], input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ready, *replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert ready["ready"] and ready["course_modules"] == [], ready
    # -I alone would not stop it (editable install): the script blocks the course's packages itself
    assert set(ready["course_import"]) == set(serve.COURSE_PACKAGES), ready
    for name, outcome in ready["course_import"].items():
        assert outcome.startswith(("ImportError", "ModuleNotFoundError")) and "halted" in outcome, (name, outcome)
    assert set(ready["load_s"]) == set(ready["reload_s"]) == {"torch.export .pt2"}
    assert [r["id"] for r in replies] == ["r0", "r1"]
    for x, reply in zip(images, replies):
        with torch.no_grad():
            expected = model(x.view(-1, 1, 28, 28))
        got = torch.tensor(reply["logits"]["torch.export .pt2"])
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        assert reply["predictions"]["torch.export .pt2"] == expected.argmax(dim=1).tolist()


def test_block_course_imports_makes_import_fail_and_reports_findability():
    names = ("helpers", "no_such_package_xyz")
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    try:
        findable = serve.block_course_imports(names)
        outcome = serve.try_imports(("helpers",))["helpers"]
    finally:  # this process keeps its course package
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    assert findable == {"helpers": True, "no_such_package_xyz": False}
    assert outcome.startswith("ModuleNotFoundError") and "halted" in outcome, outcome


def test_a_malformed_request_is_an_error_not_an_answer(exported, monkeypatch, capsys):
    _, path = exported
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"id": 0, "images": [[0.0] * 783]}) + "\n"))
    with pytest.raises(ValueError):
        serve.main(["--pt2", str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["ready"], "only the readiness line may be written"
