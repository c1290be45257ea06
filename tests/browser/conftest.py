"""The browser stage: a real `mlflow server` and headless Chromium driven by Playwright.

Runs only when asked for (`-m browser`, as tests/browser/run.sh does) and when both Playwright (the
Python package) and a Chromium binary are there: `$QUADRANTS_CHROMIUM`, else `chromium` or
`chromium-browser` on PATH (Debian's `chromium` package; Playwright's own browser download is not
used). Otherwise its tests are skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def chromium_path() -> str | None:
    explicit = os.environ.get("QUADRANTS_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # asked for: the browser stage (tests/browser/run.sh runs --stage=browser), or -m browser
    asked = config.getoption("--stage") == "browser" or config.getoption("markexpr") == "browser"
    reason = None
    if not asked:
        reason = "browser stage: run tests/browser/run.sh (or pytest --stage=browser)"
    elif importlib.util.find_spec("playwright") is None:
        reason = "Playwright for Python is not installed (pip install playwright)"
    elif chromium_path() is None:
        reason = "no Chromium (apt-get install chromium, or set QUADRANTS_CHROMIUM)"
    if reason:
        for item in items:
            if item.get_closest_marker("browser"):
                item.add_marker(pytest.mark.skip(reason=reason))
