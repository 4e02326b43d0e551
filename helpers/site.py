"""The course site: a static HTML book of the stored notebooks (``make site``).

``python -m helpers.site [--out DIR]`` writes a transformed copy of every
chapter to ``build/site_src/`` and builds it with Sphinx, MyST-NB and
sphinx-book-theme (configuration in ``site/conf.py``) into ``build/site/``.
Nothing is executed: each page shows the outputs stored in
``notebooks/NN_topic.ipynb``, and nothing is fetched from the network.

The copy differs from the notebook in what a reader of the site needs and a
learner in JupyterLab does not:

- the title is ``NN · <title>`` from ``notebooks/chapters.yaml``, so the table
  of contents, the page titles and the previous/next links all agree with it;
- under the title, a "Run this chapter" box (``git clone`` + ``make lab``, or
  Binder) with a stamp of the stored run: torch version, device, run time and
  date, read from the notebook (:func:`run_stamp`), never typed;
- every figure gets alt text (:func:`figure_alt`, as MyST-NB cell metadata);
- code cells lose the directives meant for the tests and the linter, not for a
  reader (:func:`reader_code`: ``# NBVAL_CHECK_OUTPUT``, ``# noqa``);
- after each exercise's checker cell, a closed "Show solution" dropdown with
  the reference solution's source from ``helpers/exercises/chNN.py``
  (:func:`reference_sources`; none when ``$COURSE_HIDE_SOLUTIONS`` is set).

The landing page (``index.md``) lists the chapters with a one-line summary
(:func:`chapter_summary`) and what runs where (``accelerator``, ``needs`` and
``datasets`` from ``chapters.yaml``).

Notebooks are read as plain JSON (nbformat's validation costs seconds), and
reference solutions from their source with :mod:`ast` rather than by importing
``helpers.exercises``, which imports torch: the same text that
``inspect.getsource`` gives, in a fraction of a second.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .paths import NOTEBOOKS, ROOT, build_dir, rel
from .runner import CHAPTERS_FILE, chapters

EXERCISES_DIR = ROOT / "helpers" / "exercises"
#: Sphinx's configuration folder (``conf.py``, ``_static/course.css``).
CONF_DIR = ROOT / "site"
#: The placeholder for the repository's GitHub name in the clone and Binder lines (README explains it).
REPO = "<owner>/<repo>"
#: What ``needs:`` in ``chapters.yaml`` means, for the landing page.
NEEDS = {"compiler": "a C++ compiler", "processes": "several processes"}


class SiteError(RuntimeError):
    """A notebook, the chapter table or an exercise module the site cannot be built from."""


# --------------------------------------------------------------------------
# Reading notebooks
# --------------------------------------------------------------------------


def read_notebook(path: Path) -> dict:
    """The notebook at ``path`` as a dict (nbformat 4 JSON)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def cell_source(cell: dict) -> str:
    """A cell's source as one string."""
    return _text(cell.get("source"))


def output_text(cell: dict) -> str:
    """What a code cell printed: its stream outputs and the ``text/plain`` of its results, in order."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(_text(out.get("text")))
        elif "text/plain" in out.get("data", {}):
            parts.append(_text(out["data"]["text/plain"]) + "\n")
    return "".join(parts)


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


# --------------------------------------------------------------------------
# The stamp of the stored run
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStamp:
    """What the stored outputs of a chapter ran with.

    ``source`` is ``"recorded"`` (the notebook's ``metadata.course.run``) or
    ``"derived"`` (its outputs and git); ``date_kind`` says what the date is:
    ``"ran"``, ``"committed"`` (git) or ``"file date"`` (no git). ``torch_pinned``
    is true when no output printed the version and it is the exact pin in
    ``requirements.txt`` at the notebook's commit.
    """

    torch: str
    device: str
    seconds: float
    date: str
    source: str
    date_kind: str
    torch_pinned: bool = False

    def text(self) -> str:
        """One line for the page, e.g. ``stored run: torch 2.14.1+cu130 · cpu · 45 s · committed 2026-12-01``."""
        label = "recorded run" if self.source == "recorded" else "stored run"
        version = f"{self.torch} (pinned)" if self.torch_pinned else self.torch
        return f"{label}: torch {version} · {self.device} · {self.seconds:.0f} s · {self.date_kind} {self.date}"


_VERSION = r"(\d+\.\d+\.\d+[0-9A-Za-z.+]*)"
#: ``torch 2.14.1+cu130`` as a setup cell prints it.
_TORCH_SETUP = re.compile(r"\btorch " + _VERSION)
#: Elsewhere: the same, ``torch = 2.14.1`` (a recorded figure) or ``torch.__version__   2.14.1``.
_TORCH_ANY = re.compile(r"\btorch(?:\.__version__)?(?:\s*=\s*|\s+)" + _VERSION)
#: The first device word after a cue: ``device cpu``, ``device: cpu``, ``chose cpu``, ``on cpu``.
_DEVICE = re.compile(r"\b(?:device|chose|on)\b[^\n]{0,40}?\b(cuda(?::\d+)?|cpu|mps|xpu)\b")
_FINISHED = re.compile(r"finished in (\d+(?:\.\d+)?) s\b")
_PIN = re.compile(r"^torch==(\S+)\s*$", re.M)


def setup_cell(nb: dict) -> dict | None:
    """The setup cell: the first code cell that creates ``ChapterReport(``; ``None`` if there is none."""
    return next((c for c in _code_cells(nb) if "ChapterReport(" in cell_source(c)), None)


def torch_version(nb: dict) -> str | None:
    """The torch version the stored outputs ran with, or ``None`` when no output says.

    The first ``torch X.Y.Z…`` the setup cell printed; failing that, the first
    ``torch = X.Y.Z…`` or ``torch.__version__ X.Y.Z…`` in the last code cell
    (``report.finish()`` prints the recorded figures) and then in any cell.
    """
    setup = setup_cell(nb)
    if setup is not None and (m := _TORCH_SETUP.search(output_text(setup))):
        return m.group(1).rstrip(".")
    cells = _code_cells(nb)
    for cell in cells[-1:] + cells:
        if m := _TORCH_ANY.search(output_text(cell)):
            return m.group(1).rstrip(".")
    return None


def run_device(nb: dict) -> str | None:
    """The device of the stored run: the first device word (``cpu``, ``cuda``, ``cuda:0``, ``mps``,
    ``xpu``) after ``device``, ``chose`` or ``on`` in the setup cell's output; ``None`` if none."""
    setup = setup_cell(nb)
    m = _DEVICE.search(output_text(setup)) if setup is not None else None
    return m.group(1) if m else None


def run_seconds(nb: dict) -> float | None:
    """The chapter's run time in seconds: the last ``finished in N s`` that its last code cell
    (``report.finish()``) printed; ``None`` if it printed none."""
    cells = _code_cells(nb)
    found = _FINISHED.findall(output_text(cells[-1])) if cells else []
    return float(found[-1]) if found else None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def commit_info(path: Path) -> tuple[str | None, str]:
    """``(commit, date)`` of the last commit that changed ``path`` (``git log -1``; date as YYYY-MM-DD).

    Without git, or for a file git does not track, ``(None, the file's mtime date)``.
    """
    line = _git("log", "-1", "--format=%H %cs", "--", str(Path(path).resolve()))
    if line:
        commit, date = line.split()
        return commit, date
    return None, datetime.date.fromtimestamp(Path(path).stat().st_mtime).isoformat()


def pinned_torch(commit: str | None) -> str | None:
    """The exact ``torch==`` pin of ``requirements.txt`` at ``commit`` (the working tree's without one)."""
    text = _git("show", f"{commit}:requirements.txt") if commit else None
    if text is None and (ROOT / "requirements.txt").exists():
        text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    m = _PIN.search(text or "")
    return m.group(1) if m else None


def run_stamp(nb: dict, path: Path) -> RunStamp:
    """The stamp of the run that produced the outputs stored in notebook ``nb`` (read from ``path``).

    ``nb["metadata"]["course"]["run"]`` when the notebook carries it (keys ``torch``,
    ``device``, ``date``, ``seconds``: what ``make notebooks`` records); otherwise
    derived: the torch version (:func:`torch_version`, else the pin at the
    notebook's commit), the device (:func:`run_device`), the run time
    (:func:`run_seconds`) and the date of the notebook's last commit (its file
    date without git).

    Raises:
        SiteError: a part cannot be found; the message names the notebook and the part,
            so that no page ships a wrong or partial stamp.
    """
    name = rel(path)
    run = nb.get("metadata", {}).get("course", {}).get("run")
    if run is not None:
        missing = [k for k in ("torch", "device", "date", "seconds") if run.get(k) in (None, "")]
        if missing:
            raise SiteError(f"{name}: metadata.course.run has no {', '.join(missing)}")
        return RunStamp(str(run["torch"]), str(run["device"]), float(run["seconds"]), str(run["date"])[:10],
                        "recorded", "ran")
    commit, date = commit_info(path)
    version, pinned = torch_version(nb), False
    if version is None and (version := pinned_torch(commit)) is not None:
        pinned = True
    parts = {"torch version": version, "device": run_device(nb), "run time": run_seconds(nb)}
    where = {"torch version": "no `torch X.Y.Z` in the outputs (setup cell first) and no torch== pin",
             "device": "no `device cpu` (or `chose`/`on` + a device) in the setup cell's output",
             "run time": "the last code cell printed no `finished in N s` (it should call report.finish())"}
    missing = [k for k, v in parts.items() if v is None]
    if missing:
        raise SiteError(f"{name}: cannot stamp the stored run: " + "; ".join(f"no {k}: {where[k]}" for k in missing))
    return RunStamp(version, parts["device"], parts["run time"], date, "derived",
                    "committed" if commit else "file date", pinned)


# --------------------------------------------------------------------------
# Summaries, alt text, solutions
# --------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\betc\.)\s+(?=[A-Z0-9(\"'*`])")


def chapter_summary(nb: dict) -> str:
    """The first sentence of the first paragraph after the notebook's title (markdown kept).

    Raises:
        SiteError: the first cell has no paragraph after its title.
    """
    text = cell_source(nb["cells"][0]).split("\n", 1)[-1]
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if block and not re.match(r"(#|[-*+] |\d+\. |\||>|```|<)", block):
            paragraph = " ".join(line.strip() for line in block.splitlines())
            return _SENTENCE_END.split(paragraph, maxsplit=1)[0]
    raise SiteError("the first cell has no paragraph after the title")


_TITLE_CALLS = {"suptitle", "set_title", "title"}


def _literal(node: ast.AST) -> str | None:
    """The text of a string literal; an f-string's replacement fields become ``…``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    return None


def _plain(text: str, markdown: bool = False) -> str:
    """``text`` on one line without TeX's ``$`` and ``\\``; a markdown heading also loses its
    links' targets, backticks and emphasis (``**``, ``*``)."""
    if markdown:
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        text = re.sub(r"`|\*\*|(?<!\w)\*|\*(?!\w)", "", text)
    return " ".join(re.sub(r"[$\\]", "", text).split())


def _says_something(text: str) -> bool:
    """A title with at least one word of literal text (not only f-string fields and punctuation)."""
    return re.search(r"[A-Za-z]{3,}", text) is not None


def figure_titles(source: str) -> list[str]:
    """The string literals a code cell passes to ``suptitle(``, ``set_title(``, ``title(`` or as
    ``title=``, in source order and without repeats (IPython ``%``/``!`` lines are skipped)."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        candidates = node.args[:1] if name in _TITLE_CALLS else []
        candidates += [k.value for k in node.keywords if k.arg == "title"]
        for arg in candidates:
            text = _literal(arg)
            if text and _says_something(_plain(text)):
                found.append((arg.lineno, arg.col_offset, _plain(text)))
    titles: list[str] = []
    for *_, text in sorted(found):
        if text not in titles:
            titles.append(text)
    return titles


def figure_alt(source: str, heading: str | None) -> str:
    """Alt text for the figures of a code cell: ``"Figure: "`` and the cell's titles
    (:func:`figure_titles`, joined by ``"; "``), else the nearest markdown heading above it.

    Raises:
        SiteError: the cell sets no title and there is no heading above it.
    """
    titles = figure_titles(source)
    text = "; ".join(titles) if titles else _plain(heading or "", markdown=True)
    if not text:
        raise SiteError("a figure has neither a title in its cell nor a heading above it")
    return f"Figure: {text}"


_CHECK = re.compile(r"""\bcheck\(\s*["'](\d\d\.[A-Za-z_]\w*)["']""")


def checker_names(source: str) -> list[str]:
    """The exercise names a code cell checks: ``check("05.name", ...)`` gives ``["05.name"]``."""
    return _CHECK.findall(source)


def reference_sources(chapter: str) -> dict[str, str]:
    """The reference solution of every exercise of chapter ``chapter`` (``"05"``), by exercise name.

    Read from ``helpers/exercises/chNN.py`` without importing it: each
    ``exercise("NN.name", task, reference, ...)`` call (``reference=`` or the
    third argument) names a function or class defined at the top of the
    module, and its source, decorators included, is what
    ``inspect.getsource(EXERCISES[name].reference)`` gives. Module-level string
    constants that it uses (a reference that returns C++ source) come before it.
    ``{}`` for a chapter without a module.

    Raises:
        SiteError: a reference is not a name defined at the top of the module.
    """
    path = EXERCISES_DIR / f"ch{chapter}.py"
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    defs: dict[str, ast.AST] = {}
    strings: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and _literal(node.value) is not None:
            strings.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})

    def segment(node: ast.AST) -> str:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return "\n".join(lines[first - 1:node.end_lineno])

    found: dict[str, str] = {}
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if not (isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", None)) == "exercise"):
            continue
        if not node.args or _literal(node.args[0]) is None:
            continue
        name = _literal(node.args[0])
        ref = next((k.value for k in node.keywords if k.arg == "reference"), node.args[2] if len(node.args) > 2 else None)
        if not isinstance(ref, ast.Name) or ref.id not in defs:
            raise SiteError(f"{rel(path)}: the reference of {name} is not a function or class defined in the module")
        used = {n.id for n in ast.walk(defs[ref.id]) if isinstance(n, ast.Name)}
        consts = [segment(strings[n]) for n in sorted(used & strings.keys(), key=lambda n: strings[n].lineno)]
        found[name] = "\n\n".join([*consts, segment(defs[ref.id])])
    return found


def solutions_hidden() -> bool:
    """True when ``$COURSE_HIDE_SOLUTIONS`` is set (``1``, ``true``, ``yes``): no solution on the site."""
    return os.environ.get("COURSE_HIDE_SOLUTIONS", "").strip().lower() in {"1", "true", "yes"}


# --------------------------------------------------------------------------
# The transformed copy
# --------------------------------------------------------------------------


def _markdown_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": re.sub(r"[^A-Za-z0-9_-]", "-", cell_id)[:64], "metadata": {}, "source": text}


def _fence(code: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def run_box(stem: str, stamp: RunStamp) -> str:
    """The "Run this chapter" box (MyST markdown) with the stamp of the stored run."""
    folder = REPO.split("/")[1]
    return f"""::::{{admonition}} Run this chapter
:class: tip course-run

On your machine (Python 3.10+ and `make`; the first call sets up `.venv`):

```bash
git clone https://github.com/{REPO}.git
cd {folder}
make lab    # JupyterLab on notebooks/: open {stem}.ipynb
```

On Binder, with nothing to install: open the repository on mybinder.org
(`https://mybinder.org/v2/gh/{REPO}/HEAD`, `{REPO}` being its name on GitHub),
which builds it from `environment.yml` and `postBuild`, then open `notebooks/{stem}.ipynb`.

{{.course-stamp}}
{stamp.text()}
::::
"""


def solution_cell(name: str, chapter: str, code: str) -> dict:
    """A markdown cell holding a closed "Show solution" dropdown with ``code``, the reference of ``name``."""
    fence = _fence(code)
    return _markdown_cell(
        f""":::{{dropdown}} Show solution
:class-container: course-solution

The reference solution of `{name}`, from `helpers/exercises/ch{chapter}.py` (in the
notebook, `solution("{name}")` returns it). Try the exercise first.

{fence}python
{code}
{fence}
:::
""", f"solution-{name}")


_NOQA = r"#\s*noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?"


def reader_code(source: str) -> str:
    """A code cell's source as the site shows it: without the test and lint directives a reader need not
    see (a first line ``# NBVAL_CHECK_OUTPUT``, ``# noqa`` comments); the code itself is unchanged.

    A ``# noqa: F401  (why)`` comment keeps its explanation as ``# (why)``.
    """
    lines = source.split("\n")
    if lines and lines[0].strip() == "# NBVAL_CHECK_OUTPUT":
        lines = lines[1:]
    kept = []
    for line in lines:
        line = re.sub(r"\s*" + _NOQA + r"\s*$", "", line)  # a directive that ends the line
        kept.append(re.sub(_NOQA + r"\s+", "# ", line))  # one followed by an explanation
    return "\n".join(kept)


def site_notebook(stem: str, nb: dict, title: str, stamp: RunStamp, solutions: dict[str, str] | None) -> dict:
    """The copy of notebook ``nb`` that the site renders (``nb`` itself is left unchanged).

    Args:
        stem: the chapter, e.g. ``"05_mlp_mnist"``.
        title: its title from ``chapters.yaml``; the page's heading becomes ``"05 · <title>"``.
        stamp: :func:`run_stamp` of the notebook, shown in the run box under the heading.
        solutions: :func:`reference_sources` of the chapter, or ``None`` to leave solutions out.

    Raises:
        SiteError: the first cell does not start with a ``# `` title, a checker cell names an
            exercise without a reference solution, or a figure gets no alt text.
    """
    nb = json.loads(json.dumps(nb))
    # The chapters are plain Python (no %magics or !commands; tests/test_site.py checks), which Pygments'
    # Python lexer colours exactly as the IPython lexer (a wrapper around it) does, and faster: one build
    # took 21.4 s with it against 22.5 s.
    nb.setdefault("metadata", {}).setdefault("language_info", {})["pygments_lexer"] = "python3"
    cells = nb["cells"]
    head = cell_source(cells[0]) if cells else ""
    if not head.startswith("# "):
        raise SiteError(f"notebooks/{stem}.ipynb: the first cell must start with a '# ' title")
    rest = head.split("\n", 1)[1] if "\n" in head else ""
    cells[0]["source"] = f"# {stem[:2]} · {title}\n\n{run_box(stem, stamp)}\n{rest}"
    out, heading = [], None
    for cell in cells:
        out.append(cell)
        source = cell_source(cell)
        if cell["cell_type"] == "markdown":
            heading = next((h for h in reversed(re.findall(r"^#{1,6} +(.+)$", source, re.M))), heading)
            continue
        if cell["cell_type"] != "code":
            continue
        cell["source"] = reader_code(source)
        if any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            try:
                alt = figure_alt(source, heading)
            except SiteError as err:
                raise SiteError(f"notebooks/{stem}.ipynb: {err}") from None
            meta = cell.setdefault("metadata", {}).setdefault("mystnb", {})
            meta["image"] = {**meta.get("image", {}), "alt": alt}
        for name in checker_names(source) if solutions is not None else []:
            if name not in solutions:
                raise SiteError(f"notebooks/{stem}.ipynb checks {name}, which has no reference solution "
                                f"in helpers/exercises/ch{stem[:2]}.py")
            out.append(solution_cell(name, stem[:2], solutions[name]))
    nb["cells"] = out
    return nb


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def index_markdown(table: dict[str, dict], summaries: dict[str, str], stamps: dict[str, RunStamp]) -> str:
    """The landing page (MyST markdown): the course, the two commands, the chapter table, the toctree.

    Args:
        table: :func:`chapters`; its order and titles are the site's table of contents.
        summaries: :func:`chapter_summary` of each chapter.
        stamps: :func:`run_stamp` of each chapter (its run time goes in the table).
    """
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    course = readme.split("\n", 1)[0].lstrip("# ").strip()
    intro = next(b for b in re.split(r"\n\s*\n", readme.split("\n", 1)[1]) if b.strip() and not b.startswith("#"))
    rows = []
    for stem, row in table.items():
        where = "CPU" if row.get("accelerator", "none") == "none" else "CPU; its GPU-only cells skip there"
        needs = ", ".join(NEEDS.get(n, n) for n in row.get("needs") or []) or "-"
        data = ", ".join(f"`{d}`" for d in row.get("datasets") or []) or "-"
        rows.append(f"| {stem[:2]} | [{_cell(row['title'])}]({stem}.ipynb) | {_cell(summaries[stem])} | {where} "
                    f"| {needs} | {data} | {stamps[stem].seconds:.0f} s |")
    toc = "\n".join(f"{stem[:2]} · {row['title']} <{stem}>" for stem, row in table.items())
    return f"""# {course}

{intro.strip()}

## Run it

```bash
git clone https://github.com/{REPO}.git
cd {REPO.split('/')[1]}
make lab    # set up .venv on first use, then JupyterLab on notebooks/
make run    # execute every chapter, write build/report.md
```

Or open the repository on mybinder.org (`https://mybinder.org/v2/gh/{REPO}/HEAD`, with
`{REPO}` the repository's name on GitHub): Binder builds `environment.yml` and `postBuild`.
The pages below show the outputs stored in the notebooks; nothing was re-run to build them.

## Chapters

Every chapter runs on a CPU; "GPU-only cells" are the few that need CUDA and print why
they were skipped without one. The run time is that of the stored run.

| # | chapter | what it is about | runs on | needs | datasets | run time |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

```{{toctree}}
:hidden:
:maxdepth: 1

{toc}
```
"""


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (an unchanged page is not rebuilt)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_sources(src_dir: Path) -> list[str]:
    """Write the site's sources to ``src_dir``: ``index.md`` and each chapter's transformed copy.

    Returns:
        The chapter stems, in course order.

    Raises:
        SiteError: a chapter's notebook is missing or cannot be stamped or transformed
            (see :func:`run_stamp` and :func:`site_notebook`).
    """
    src_dir.mkdir(parents=True, exist_ok=True)
    table = chapters()
    hidden = solutions_hidden()
    summaries, stamps = {}, {}
    for stem, row in table.items():
        path = NOTEBOOKS / f"{stem}.ipynb"
        if not path.exists():
            raise SiteError(f"{rel(CHAPTERS_FILE)} lists {stem}, but {rel(path)} does not exist")
        nb = read_notebook(path)
        stamps[stem] = run_stamp(nb, path)
        try:
            summaries[stem] = chapter_summary(nb)
        except SiteError as err:
            raise SiteError(f"{rel(path)}: {err}") from None
        copy = site_notebook(stem, nb, row["title"], stamps[stem], None if hidden else reference_sources(stem[:2]))
        _write(src_dir / f"{stem}.ipynb", json.dumps(copy, indent=1, ensure_ascii=False) + "\n")
    for stale in src_dir.glob("*.ipynb"):
        if stale.stem not in table:
            stale.unlink()
    _write(src_dir / "index.md", index_markdown(table, summaries, stamps))
    return list(table)


def build(out_dir: Path | None = None, *, work_dir: Path | None = None, jobs: int = 1) -> float:
    """Build the site into ``out_dir`` (default ``build/site``); returns the seconds it took.

    The transformed sources go to ``<work_dir>/site_src`` and Sphinx's doctrees
    to ``<work_dir>/site_doctrees`` (``work_dir`` defaults to ``out_dir``'s
    parent), so a second build only re-renders the chapters that changed.
    MyST-NB writes the output images to ``<out_dir's parent>/jupyter_execute``.

    Raises:
        SiteError: the sources cannot be written (:func:`write_sources`) or Sphinx failed.
    """
    from sphinx.cmd.build import build_main

    start = time.perf_counter()
    out_dir = Path(out_dir) if out_dir is not None else build_dir() / "site"
    work_dir = Path(work_dir) if work_dir is not None else out_dir.parent
    src = work_dir / "site_src"
    write_sources(src)
    args = ["-b", "html", "-q", "-c", str(CONF_DIR), "-d", str(work_dir / "site_doctrees"), "-j", str(jobs),
            str(src), str(out_dir)]
    if build_main(args) != 0:
        raise SiteError(f"sphinx-build failed (its messages are above): {' '.join(args)}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.site [--out DIR] [-j N]``: build the site and print where it is."""
    parser = argparse.ArgumentParser(prog="python -m helpers.site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="output folder (default build/site)")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="Sphinx processes (default 1: on 2 cores, 2 took the same 19-21 s and 10-20 %% more CPU)")
    args = parser.parse_args(argv)
    try:
        seconds = build(args.out, jobs=args.jobs)
    except SiteError as err:
        print(f"site: {err}", file=sys.stderr)
        return 1
    index = (args.out or build_dir() / "site") / "index.html"
    print(f"site: open {rel(index)} (built in {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
