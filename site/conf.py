"""Sphinx configuration of the course site (``make site``, built by :mod:`helpers.site`).

The source folder is the transformed copy that ``helpers.site`` writes to
``build/site_src/`` (``index.md`` and the chapters as ``.ipynb`` with their
stored outputs); this folder only holds the configuration and the static CSS.
Nothing is executed (``nb_execution_mode = "off"``) and nothing is fetched:
the theme ships its assets, and MathJax comes from the ``jupyter-server-mathjax``
package (MathJax 2.7) instead of Sphinx's default CDN address, so the site
renders its maths with no network.
"""

from __future__ import annotations

import shutil
from pathlib import Path

project = "PyTorch, from the first tensor to FSDP"
author = "the course authors"
copyright = "the course authors"
html_title = project

extensions = ["myst_nb", "sphinx_design", "sphinx.ext.mathjax"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type"]

# Notebooks are rendered from their stored outputs only.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath", "attrs_block"]
myst_heading_anchors = 3
myst_update_mathjax = False  # myst would write a MathJax 3 configuration; ours is MathJax 2 (below)

html_theme = "sphinx_book_theme"
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": False,  # it offers the transformed copy, not the learner's notebook
    "show_toc_level": 2,
    "navbar_persistent": [],  # search sits in the sidebar; no second search field in a header bar
}
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # else the browser asks for /favicon.ico and logs its 404
html_context = {"default_mode": "auto"}  # light or dark as the reader's system prefers
html_css_files = ["course.css"]
html_copy_source = False  # the stored notebooks are several MB; the repository has them
html_show_sourcelink = False

# MathJax 2.7 from the installed jupyter-server-mathjax package, copied into _static/mathjax.
mathjax_path = "mathjax/MathJax.js"
mathjax2_config = {
    "config": ["TeX-AMS-MML_HTMLorMML-full.js"],
    "tex2jax": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]], "processEscapes": True},
    "messageStyle": "none",
    # The package ships only the STIX-Web web fonts (as the Jupyter notebook configures it).
    # MathJax measures them against a "blank" font it declares as url('about:blank'), which
    # Chromium refuses with a CORS error in the console; a local() name that matches no font
    # is just as blank and loads nothing.
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None,
                 "styles": {"@font-face": {"font-family": "MathJax_Blank", "src": "local('MathJax_Blank')"}}},
}


def _copy_mathjax(app, exception) -> None:
    """Copy MathJax 2 into ``<outdir>/_static/mathjax`` once the HTML is written (offline maths)."""
    if exception is not None or app.builder.format != "html":
        return
    import jupyter_server_mathjax

    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    target = Path(app.outdir) / "_static" / "mathjax"
    if not (target / "MathJax.js").exists():
        shutil.copytree(source, target, dirs_exist_ok=True)


def setup(app):
    app.connect("build-finished", _copy_mathjax)
