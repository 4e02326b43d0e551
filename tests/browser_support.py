"""Headless Chromium for the browser tests (JupyterLab in test_lab_browser.py, the site in test_site_browser.py).

Both drive Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them when missing) with
``selenium``. Without them a browser test is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import shutil

import pytest

#: Chromium's flags: no display, root in a container, a small /dev/shm, and a laptop-sized window.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000")


def _missing() -> str | None:
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        return "needs Debian's chromium and chromium-driver (apt install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium"
    return None


def require_browser() -> None:
    """Skip the calling test when Chromium, its driver or selenium is missing; fail instead under ``CI=true``."""
    why = _missing()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the browser test {why}; .ci/run should have installed it")
        pytest.skip(why)


def chromium(browser_log: bool = False):
    """A new headless Chromium (a ``selenium`` WebDriver; call ``quit()`` when done).

    ``browser_log=True`` keeps the page's console messages for ``driver.get_log("browser")``.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    if browser_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
