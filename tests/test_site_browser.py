"""The course site (``make site``) as a reader sees it, in headless Chromium.

Builds the site with :func:`helpers.site.build` into ``build/site`` (Sphinx
re-renders only the chapters whose transformed copy changed, so a second run
is quick; CI starts from an empty ``build/``), serves the folder with the
standard library's HTTP server on 127.0.0.1, and opens the landing page and
every chapter. On each page: no console error (the browser log at level
SEVERE, which includes any asset that failed to load, such as MathJax's), every
image loaded, every notebook figure with alt text, every solution dropdown
closed, and every internal link pointing at a file of the site (and, with an
anchor, at an id in that file). Also: the maths is typeset by the bundled
MathJax, the search page finds a chapter by a word on it, and in dark mode
the figures keep a white background; no page holds the checkout's or the
home folder's path. Screenshots (the landing page, a chapter, a chapter in
dark mode, the search) go to ``build/site_shots/``; on failure, one of the
failing page to ``build/browser/``.

Needs Debian's ``chromium`` and ``chromium-driver`` and ``selenium``; without
them the test is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from helpers import site
from helpers.paths import build_dir

from .browser_support import chromium, require_browser

# Sphinx 9 deprecations inside sphinx-book-theme and myst-parser, not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated. Check CHANGES for Sphinx API")

#: A word of chapter 10's text that the search must find it by.
SEARCH_WORD, SEARCH_PAGE = "Nesterov", "10_optimizers.html"
#: The page whose figures are checked in dark mode.
DARK_PAGE = "05_mlp_mnist.html"
#: A page with maths, to check that MathJax typesets it offline.
MATH_PAGE = "04_linear_regression.html"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request in the test output
        pass


@pytest.fixture(scope="module")
def served():
    """The built site, served on 127.0.0.1: yields (base URL, site folder, build seconds)."""
    require_browser()
    out = build_dir() / "site"
    seconds = site.build(out)
    print(f"site built in {seconds:.1f} s")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", out, seconds
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def driver():
    browser = chromium(browser_log=True)
    try:
        yield browser
    finally:
        browser.quit()


# Run in each page: what it shows, for the checks below.
_PAGE_JS = """
const imgs = Array.from(document.images);
return {
  title: document.title,
  broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
  figures: document.querySelectorAll('div.cell_output img').length,
  no_alt: Array.from(document.querySelectorAll('div.cell_output img'))
    .filter(i => !(i.getAttribute('alt') || '').trim()).map(i => i.getAttribute('src')),
  solutions: document.querySelectorAll('details.course-solution').length,
  open_solutions: document.querySelectorAll('details.course-solution[open]').length,
  stamp: (document.querySelector('.course-stamp') || {}).textContent || null,
  hrefs: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
};
"""


def _ids(page: Path, cache: dict[Path, set[str]]) -> set[str]:
    if page not in cache:
        cache[page] = set(re.findall(r"""\bid=["']([^"']+)["']""", page.read_text(encoding="utf-8")))
    return cache[page]


def _bad_links(out: Path, page: str, hrefs: list[str], cache: dict[Path, set[str]]) -> list[str]:
    """The internal links of ``page`` whose file (or anchor in it) does not exist under ``out``."""
    bad = []
    for href in hrefs:
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
            continue  # external
        path = unquote(parts.path)
        if path and not path.endswith(".html"):
            continue  # an asset (image, _static), checked by loading it
        target = (out / page).parent / path if path else out / page
        if not target.resolve().is_file():
            bad.append(f"{href} (no file)")
        elif parts.fragment and unquote(parts.fragment) not in _ids(target.resolve(), cache):
            bad.append(f"{href} (no id {parts.fragment!r} in {path or page})")
    return bad


def _wait(driver, script: str, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout_s:.0f} s for {what}")


def _severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.slow
def test_the_site_in_a_browser(served, driver):
    base, out, build_seconds = served
    start = time.monotonic()
    table = site.chapters()
    pages = ["index.html", *(f"{stem}.html" for stem in table)]
    shots = build_dir() / "site_shots"
    shots.mkdir(parents=True, exist_ok=True)
    ids: dict[Path, set[str]] = {}
    current = "index.html"
    # No machine's paths in what is published: the checkout's folder and the home folder.
    for page in [*out.glob("*.html"), out / "searchindex.js"]:
        text = page.read_text(encoding="utf-8")
        for private in (str(site.ROOT), str(Path.home())):
            assert private not in text, f"{page.name} holds the path {private}"
    try:
        for current in pages:
            driver.get(f"{base}/{current}")
            if current == MATH_PAGE:
                # MathJax 2 marks every typeset formula with class MathJax (display: MathJax_Display).
                _wait(driver, "return document.querySelectorAll('span.MathJax, div.MathJax_Display').length", 30,
                      f"MathJax to typeset the maths of {current}")
            state = driver.execute_script(_PAGE_JS)
            errors = _severe(driver)
            assert not errors, f"{current}: console errors {errors}"
            assert not state["broken"], f"{current}: images that did not load: {state['broken']}"
            assert not state["no_alt"], f"{current}: figures without alt text: {state['no_alt']}"
            bad = _bad_links(out, current, state["hrefs"], ids)
            assert not bad, f"{current}: internal links that resolve to nothing: {bad}"
            assert state["open_solutions"] == 0, f"{current}: {state['open_solutions']} solutions start open"
            if current != "index.html":
                stem = current.removesuffix(".html")
                title = table[stem]["title"]
                assert state["title"].startswith(f"{stem[:2]} · {title}"), (current, state["title"])
                assert state["stamp"] and "torch " in state["stamp"], f"{current}: no run stamp ({state['stamp']!r})"
                nb = site.read_notebook(site.NOTEBOOKS / f"{stem}.ipynb")
                checks = sum(len(site.checker_names(site.cell_source(c))) for c in nb["cells"] if c["cell_type"] == "code")
                want = 0 if site.solutions_hidden() else checks
                assert state["solutions"] == want, f"{current}: {state['solutions']} solutions for {checks} exercises"
            if current in ("index.html", MATH_PAGE):
                driver.save_screenshot(str(shots / current.replace(".html", ".png")))

        current = DARK_PAGE
        driver.get(f"{base}/{DARK_PAGE}")
        driver.execute_script("document.documentElement.dataset.theme = 'dark';")
        backgrounds = driver.execute_script(
            "return Array.from(document.querySelectorAll('div.cell_output img'))"
            ".map(i => getComputedStyle(i).backgroundColor);")
        assert backgrounds, f"{DARK_PAGE} has no figures to check in dark mode"
        assert all(b in ("rgb(255, 255, 255)", "rgba(255, 255, 255, 1)") for b in backgrounds), (
            f"in dark mode the figures of {DARK_PAGE} are on {sorted(set(backgrounds))}, not white")
        page_bg = driver.execute_script("return getComputedStyle(document.body).backgroundColor;")
        assert page_bg != backgrounds[0], f"dark mode did not apply: the page background is {page_bg}"
        driver.execute_script("document.querySelector('div.cell_output img').scrollIntoView({block: 'center'});")
        driver.save_screenshot(str(shots / "05_mlp_mnist_dark.png"))

        current = "search.html"
        driver.get(f"{base}/search.html?q={SEARCH_WORD}")
        hits = _wait(driver, "const a = Array.from(document.querySelectorAll('#search-results ul.search li a'))"
                             ".map(a => a.getAttribute('href')); return a.length ? a : null;", 30,
                     f"search results for {SEARCH_WORD!r}")
        assert any(h.split("?")[0].split("#")[0] == SEARCH_PAGE for h in hits), (
            f"searching {SEARCH_WORD!r} did not find {SEARCH_PAGE}: {hits}")
        assert not _severe(driver), f"search.html: console errors {_severe(driver)}"
        driver.save_screenshot(str(shots / "search.png"))
    except BaseException:
        failed = build_dir() / "browser"
        failed.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(failed / f"site_{current.replace('.html', '')}.png"))
        raise
    print(f"site: built in {build_seconds:.1f} s; {len(pages)} pages and search checked in a browser in "
          f"{time.monotonic() - start:.1f} s")
