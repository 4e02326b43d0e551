"""Facts chapter 00 states about the installed torch and about this repository, checked here, not in the notebook.

A learner's own environment may differ (another package installed, another
torch), so these are author checks: the chapter's quotations of torch's error
messages are still what the pinned torch says, and the course itself does not
use the discontinued torchtext.
"""

from __future__ import annotations

import glob
import importlib.util
import mmap
import os
import re

import pytest
import torch

from helpers.authoring import sources
from helpers.paths import ROOT, chapter_source

CHAPTER = chapter_source("00_environment")

#: The fixed parts of the two device-mismatch messages the chapter quotes (its Pitfalls section).
ELEMENTWISE_TEXT = "Expected all tensors to be on the same device, but found at least two devices, "
NAMED_ARGUMENT_TEXTS = (
    "Expected all tensors to be on the same device, but got ",
    ", different from other tensors on ",
    " (when checking argument in method ",
)
#: The wording torch used before; answers on the web still quote it, and the chapter says it is gone.
OLD_WORDING = "(when checking argument for argument "


@pytest.fixture(scope="module")
def torch_cpu_library() -> dict[str, bool]:
    """Which of the texts torch's C++ library (libtorch_cpu.so, .dylib or torch_cpu.dll) contains."""
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    found = [p for p in glob.glob(os.path.join(lib_dir, "*torch_cpu.*")) if p.endswith((".so", ".dylib", ".dll"))]
    assert len(found) == 1, f"expected one torch_cpu library in torch/lib, found {found}"
    with open(found[0], "rb") as lib, mmap.mmap(lib.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        texts = (ELEMENTWISE_TEXT, *NAMED_ARGUMENT_TEXTS, OLD_WORDING)
        return {text: mapped.find(text.encode()) >= 0 for text in texts}


def test_the_chapter_quotes_both_device_mismatch_messages():
    source = CHAPTER.read_text(encoding="utf-8")
    assert f"RuntimeError: {ELEMENTWISE_TEXT}cuda:0 and cpu!" in source
    for text in NAMED_ARGUMENT_TEXTS:
        assert text in source, f"chapter 00 no longer quotes {text!r}"


def test_the_quoted_messages_are_in_the_installed_torch(torch_cpu_library):
    missing = [t for t in (ELEMENTWISE_TEXT, *NAMED_ARGUMENT_TEXTS) if not torch_cpu_library[t]]
    assert not missing, f"torch {torch.__version__}'s library no longer contains {missing}: update chapter 00"


def test_the_old_wording_is_gone_as_the_chapter_says(torch_cpu_library):
    assert not torch_cpu_library[OLD_WORDING], f"torch still has {OLD_WORDING!r}: chapter 00 says it was replaced"


def test_the_cpu_wheel_message_the_chapter_quotes_is_in_torch_cuda():
    import inspect

    assert "Torch not compiled with CUDA enabled" in inspect.getsource(torch.cuda)


def test_torchtext_is_neither_pinned_nor_installed():
    requirements = (ROOT / "requirements.txt").read_text().splitlines()
    assert not any(re.match(r"\s*torchtext\b", line) for line in requirements), "requirements.txt pins torchtext"
    assert importlib.util.find_spec("torchtext") is None, "torchtext is installed in the course environment"


def test_no_chapter_imports_torchtext():
    importing = [
        p.name for p in sources()
        if re.search(r"^\s*(import|from)\s+torchtext\b", p.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert not importing, f"these chapters import the discontinued torchtext: {importing}"
